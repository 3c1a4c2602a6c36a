package meta

import (
	"regexp"
	"strings"
	"testing"
)

var nameRE = regexp.MustCompile(`^bf-[a-z0-9]+(-[a-z0-9]+)*-[0-9a-f]{8}$`)

func checkName(t *testing.T, provider, machine string) string {
	t.Helper()
	n := DomainName(provider, machine)
	if !nameRE.MatchString(n) || len(n) > 61 {
		t.Fatalf("DomainName(%q, %q) = %q: unsafe or too long", provider, machine, n)
	}
	if n != DomainName(provider, machine) {
		t.Fatal("not deterministic")
	}
	if !strings.HasPrefix(n, NamePrefix(provider)) {
		t.Fatalf("%q lacks the provider prefix %q", n, NamePrefix(provider))
	}
	return n
}

func TestDomainName(t *testing.T) {
	t.Parallel()
	if got := checkName(t, "prod-eu", "m-123"); !strings.HasPrefix(got, "bf-prod-eu-m-123-") {
		t.Errorf("readable parts lost: %q", got)
	}
	// Pairs whose readable parts collide must still differ.
	pairs := [][2]string{
		{"p", "Machine"}, {"p", "machine"}, {"p", "ma chine"}, {"p", "ma/chine"}, {"P", "machine"},
		{"p", ""}, {"p", "-"}, {"p", "ü"}, {"", "x"},
		{"p", strings.Repeat("a", 40)}, {"p", strings.Repeat("a", 41)},
		{"p-q", "r"}, {"p", "q-r"},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		n := checkName(t, p[0], p[1])
		if prev, dup := seen[n]; dup {
			t.Fatalf("%v and %v both map to %q", prev, p, n)
		}
		seen[n] = p
	}
}

// FuzzDomainName: names are safe, bounded and one-to-one over pairs.
func FuzzDomainName(f *testing.F) {
	f.Add("prov", "m1", "prov", "m2")
	f.Add("a", "b-c", "a-b", "c")
	f.Add("P", "X", "p", "x")
	f.Add("", "", "x", "")
	f.Fuzz(func(t *testing.T, p1, m1, p2, m2 string) {
		if strings.ContainsRune(p1, 0) || strings.ContainsRune(p2, 0) {
			t.Skip("provider ids never contain NUL (Config.Validate)")
		}
		n1, n2 := checkName(t, p1, m1), checkName(t, p2, m2)
		if (p1 != p2 || m1 != m2) && n1 == n2 {
			t.Fatalf("(%q,%q) and (%q,%q) collide on %q", p1, m1, p2, m2, n1)
		}
	})
}
