// Package labenv reads the env file `scripts/lab.sh up` writes
// (/run/bigfleet-lab/env, docs/lab.md), for the suites that run on the lab
// (the lab integration tests and the lab chaos soak). Test support only.
package labenv

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Env is the lab's env file, typed.
type Env struct {
	Hosts     string   // BIGFLEET_LAB_HOSTS: one zone per host
	HostsZone string   // BIGFLEET_LAB_HOSTS_ZONE: every host in zone "lab"
	Args      []string // BIGFLEET_LAB_ARGS
	State     string   // BIGFLEET_LAB_STATE (creds/, pki/)
	Data      string   // BIGFLEET_LAB_DATA (hosts/NAME/upper: each host's disk)
	Script    string   // scripts/lab.sh
	N         int      // BIGFLEET_LAB_N: how many hosts are up
}

// ErrIncomplete: the env file exists but lacks what every suite needs
// (the hosts file, the provider's flags, the lab script).
var ErrIncomplete = errors.New("lab env file is incomplete")

// Path is $BIGFLEET_LAB_ENV, or /run/bigfleet-lab/env.
func Path() string {
	if p := os.Getenv("BIGFLEET_LAB_ENV"); p != "" {
		return p
	}
	return "/run/bigfleet-lab/env"
}

// Load reads Path. An error wrapping ErrIncomplete means the lab is up but
// its env file is not whole; any other means there is no lab to read.
func Load() (Env, error) {
	raw, err := os.ReadFile(Path())
	if err != nil {
		return Env{}, err
	}
	e := parse(string(raw))
	if e.Hosts == "" || e.Script == "" || len(e.Args) == 0 {
		return e, fmt.Errorf("%s: %w: %+v", Path(), ErrIncomplete, e)
	}
	return e, nil
}

// parse reads the file's `export K="V"` lines.
func parse(raw string) Env {
	var e Env
	for _, line := range strings.Split(raw, "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"'`)
		switch k {
		case "BIGFLEET_LAB_HOSTS":
			e.Hosts = v
		case "BIGFLEET_LAB_HOSTS_ZONE":
			e.HostsZone = v
		case "BIGFLEET_LAB_ARGS":
			e.Args = strings.Fields(v)
		case "BIGFLEET_LAB_STATE":
			e.State = v
		case "BIGFLEET_LAB_DATA":
			e.Data = v
		case "BIGFLEET_LAB_SCRIPT":
			e.Script = v
		case "BIGFLEET_LAB_N":
			_, _ = fmt.Sscan(v, &e.N)
		}
	}
	return e
}
