package labenv

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "env")
	t.Setenv("BIGFLEET_LAB_ENV", path)
	if _, err := Load(); err == nil || errors.Is(err, ErrIncomplete) {
		t.Fatalf("no file: %v, want a read error", err)
	}
	body := "export BIGFLEET_LAB_HOSTS=\"/run/h.yaml\"\nexport BIGFLEET_LAB_ARGS='--a=1 --b'\nBIGFLEET_LAB_N=4\nnot a line\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("no script: %v, want ErrIncomplete", err)
	}
	if err := os.WriteFile(path, []byte(body+"export BIGFLEET_LAB_SCRIPT=/x/lab.sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := Load()
	if err != nil || e.Hosts != "/run/h.yaml" || e.Script != "/x/lab.sh" || e.N != 4 || !slices.Equal(e.Args, []string{"--a=1", "--b"}) {
		t.Fatalf("Load: %+v, %v", e, err)
	}
}
