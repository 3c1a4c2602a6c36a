package intents

import (
	"errors"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeAPI is one ConfigMap behind a fake clientset that enforces what the
// real API server does and client-go's fake does not: an update with a
// stale resourceVersion is a Conflict.
type fakeAPI struct {
	mu      sync.Mutex
	cm      *corev1.ConfigMap // nil: missing
	rv      int
	updates int
	// fail, if set, answers an update instead of applying it.
	fail error
	// landThenFail applies the next update and then answers it with an
	// error, as a request that timed out after the server applied it.
	landThenFail bool
	// hold, if set, is waited on by each update (to pile commits up).
	hold    chan struct{}
	waiting int
}

const (
	testNS   = "ns"
	testName = "prov-intents"
)

var cmResource = schema.GroupResource{Resource: "configmaps"}

func newFakeAPI(t *testing.T) (*fakeAPI, *fake.Clientset) {
	t.Helper()
	f := &fakeAPI{cm: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: testName, Namespace: testNS}}, rv: 1}
	f.cm.ResourceVersion = "1"
	cs := fake.NewClientset()
	cs.PrependReactor("get", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.cm == nil || a.(k8stesting.GetAction).GetName() != testName {
			return true, nil, apierrors.NewNotFound(cmResource, a.(k8stesting.GetAction).GetName())
		}
		return true, f.cm.DeepCopy(), nil
	})
	cs.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if f.hold != nil {
			f.mu.Lock()
			f.waiting++
			f.mu.Unlock()
			<-f.hold
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		in := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap).DeepCopy()
		if f.fail != nil {
			return true, nil, f.fail
		}
		if in.ResourceVersion != f.cm.ResourceVersion {
			return true, nil, apierrors.NewConflict(cmResource, in.Name, errors.New("stale resourceVersion"))
		}
		f.rv++
		f.updates++
		in.ResourceVersion = strconv.Itoa(f.rv)
		f.cm = in
		if f.landThenFail {
			f.landThenFail = false
			return true, nil, apierrors.NewTimeoutError("request timed out", 1)
		}
		return true, in.DeepCopy(), nil
	})
	return f, cs
}

func (f *fakeAPI) journal(cs *fake.Clientset, identity string) *Journal {
	return NewJournal(cs.CoreV1().ConfigMaps(testNS), testNS, testName, identity, 2*time.Second)
}

// content decodes what the ConfigMap holds now.
func (f *fakeAPI) content(t *testing.T) Content {
	t.Helper()
	f.mu.Lock()
	data := maps.Clone(f.cm.BinaryData)
	f.mu.Unlock()
	c, err := decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *fakeAPI) updateCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.updates
}
