package reconcile

import "testing"

func TestListedCoversPerHost(t *testing.T) {
	l := NewListed()
	if l.Covers("z", "a") {
		t.Fatal("an unlisted zone covers its hosts")
	}
	l.Mark("z", []string{"a"}, []string{"b"})
	for _, c := range []struct {
		host string
		want bool
	}{{"a", true}, {"b", false}, {"", false}, {"other", false}} {
		if got := l.Covers("z", c.host); got != c.want {
			t.Errorf("after a listing of a without b: covers(%q) = %v", c.host, got)
		}
	}
	l.Mark("z", []string{"b"}, []string{"a"}) // a was listed before: known
	for _, h := range []string{"a", "b", "", "other"} {
		if !l.Covers("z", h) {
			t.Errorf("every host listed since start: covers(%q) false", h)
		}
	}
	l.Mark("w", nil, nil) // a backend without per-host listings
	if !l.Covers("w", "") || !l.Covers("w", "x") {
		t.Error("a zone listed whole does not cover its machines")
	}
}
