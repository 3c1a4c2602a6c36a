package intents

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// Key is the ConfigMap's binaryData key holding the journal's records and
// host files; its marks are in MarkBuckets more keys (content.go).
const Key = "journal.json.gz"

// WriterAnnotation names the replica (pod name and a per-claim nonce)
// that last claimed the journal. A write whose resourceVersion is stale
// is re-read: if the writer is still this claim, the conflict was its own
// earlier write that timed out after landing; otherwise another replica
// has taken over, and this one must not write again.
const WriterAnnotation = "libvirt-provider.bigfleet.io/journal-writer"

// MaxBytes bounds the journal's encoded size: a ConfigMap is at most
// 1 MiB with its metadata. A write past it fails (and its calls are not
// acknowledged) rather than be refused by the API server half-way.
const MaxBytes = 1000 << 10

// ErrSuperseded is what every write returns once another replica has
// claimed the journal: this one is no longer the leader.
var ErrSuperseded = errors.New("the journal was claimed by another replica: this one no longer leads")

// ErrTooLarge is what a write returns when the journal would exceed
// MaxBytes.
var ErrTooLarge = errors.New("the journal would exceed its ConfigMap's size limit")

// Journal is the ConfigMap: namespace/name, pre-created (empty) by the
// chart; the provider needs only get and update on it.
type Journal struct {
	cms       typedcorev1.ConfigMapInterface
	namespace string
	name      string
	identity  string
	timeout   time.Duration

	mu         sync.Mutex
	rv         string // the resourceVersion of our last read or write
	stamp      string // our WriterAnnotation since Claim ("" before)
	superseded bool
}

// NewJournal is the ConfigMap name in namespace, written as identity
// (the pod's name). timeout bounds each API request.
func NewJournal(cms typedcorev1.ConfigMapInterface, namespace, name, identity string, timeout time.Duration) *Journal {
	return &Journal{cms: cms, namespace: namespace, name: name, identity: identity, timeout: timeout}
}

// Name is "namespace/name", for messages.
func (j *Journal) Name() string { return j.namespace + "/" + j.name }

// Check reads the ConfigMap once, so a missing one or missing rights stop
// the process at startup, naming it, rather than at takeover.
func (j *Journal) Check(ctx context.Context) error {
	_, err := j.get(ctx)
	return err
}

func (j *Journal) get(ctx context.Context) (*corev1.ConfigMap, error) {
	ctx, cancel := context.WithTimeout(ctx, j.timeout)
	defer cancel()
	cm, err := j.cms.Get(ctx, j.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("the journal ConfigMap %s does not exist: create it empty (the chart does) and grant get and update on it", j.Name())
	}
	if err != nil {
		return nil, fmt.Errorf("read the journal ConfigMap %s: %w", j.Name(), err)
	}
	return cm, nil
}

// Claim makes this replica the journal's writer and returns what it
// holds: the new leader calls it before it acts. From the claim on, a
// write of an earlier writer (a leader that lost its lease and has not
// yet stopped) conflicts and fails, and fails for good.
func (j *Journal) Claim(ctx context.Context) (Content, error) {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	stamp := j.identity + "/" + hex.EncodeToString(nonce[:])
	for try := 0; ; try++ {
		cm, err := j.get(ctx)
		if err != nil {
			return Content{}, err
		}
		c, err := decode(cm.BinaryData)
		if err != nil {
			return Content{}, fmt.Errorf("the journal ConfigMap %s: %w", j.Name(), err)
		}
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		cm.Annotations[WriterAnnotation] = stamp
		rv, err := j.update(ctx, cm)
		if apierrors.IsConflict(err) && try < 3 {
			continue // a write of the old leader landed between: read again
		}
		if err != nil {
			return Content{}, fmt.Errorf("claim the journal ConfigMap %s: %w", j.Name(), err)
		}
		j.mu.Lock()
		j.rv, j.stamp, j.superseded = rv, stamp, false
		j.mu.Unlock()
		return c, nil
	}
}

func (j *Journal) update(ctx context.Context, cm *corev1.ConfigMap) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, j.timeout)
	defer cancel()
	out, err := j.cms.Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		return "", err
	}
	return out.ResourceVersion, nil
}

// size is what a ConfigMap's size limit counts of parts.
func size(parts map[string][]byte) int {
	n := 0
	for k, v := range parts {
		n += len(k) + len(v)
	}
	return n
}

// write replaces the journal with parts, if this replica still holds its
// claim. Calls are serialised by the caller (Store's flusher).
func (j *Journal) write(ctx context.Context, parts map[string][]byte) error {
	if n := size(parts); n > MaxBytes {
		return fmt.Errorf("%w: %d bytes, at most %d (%s)", ErrTooLarge, n, MaxBytes, j.Name())
	}
	j.mu.Lock()
	rv, stamp, superseded := j.rv, j.stamp, j.superseded
	j.mu.Unlock()
	switch {
	case superseded:
		return ErrSuperseded
	case stamp == "":
		return errors.New("intents: write before Claim")
	}
	for try := 0; ; try++ {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: j.name, Namespace: j.namespace, ResourceVersion: rv,
				Annotations: map[string]string{WriterAnnotation: stamp}},
			BinaryData: parts,
		}
		next, err := j.update(ctx, cm)
		if err == nil {
			j.setRV(next)
			return nil
		}
		if !apierrors.IsConflict(err) || try > 0 {
			return fmt.Errorf("write the journal ConfigMap %s: %w", j.Name(), err)
		}
		// Stale resourceVersion: our own write that timed out after it
		// landed, or another replica's claim.
		cur, gerr := j.get(ctx)
		if gerr != nil {
			return gerr
		}
		if cur.Annotations[WriterAnnotation] != stamp {
			j.mu.Lock()
			j.superseded = true
			j.mu.Unlock()
			return fmt.Errorf("%w (%s, now written by %q)", ErrSuperseded, j.Name(), cur.Annotations[WriterAnnotation])
		}
		rv = cur.ResourceVersion
	}
}

func (j *Journal) setRV(rv string) {
	j.mu.Lock()
	j.rv = rv
	j.mu.Unlock()
}
