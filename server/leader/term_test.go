package leader

import (
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// Term is the Lease's uid and leaseTransitions while this process holds
// it; another holder, or no Lease, is an error (it must not act).
func TestTerm(t *testing.T) {
	c := valid()
	holder, tr := "pod-a", int32(3)
	cs := fake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name, UID: "uid-1"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseTransitions: &tr},
	})
	lease, n, err := Term(t.Context(), cs, c)
	if err != nil || lease != "uid-1" || n != 3 {
		t.Fatalf("Term = %q %d %v, want uid-1 3", lease, n, err)
	}
	c.Identity = "pod-b"
	if _, _, err := Term(t.Context(), cs, c); err == nil || !strings.Contains(err.Error(), `held by "pod-a", not "pod-b"`) {
		t.Fatalf("another holder: %v", err)
	}
	c.Name = "missing"
	if _, _, err := Term(t.Context(), cs, c); err == nil {
		t.Fatal("no Lease: no error")
	}
}
