//go:build image

package image

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The OCI runtime spec (config.json), the fields this run sets.
type runtimeSpec struct {
	OCIVersion string      `json:"ociVersion"`
	Process    specProcess `json:"process"`
	Root       struct {
		Path     string `json:"path"`
		Readonly bool   `json:"readonly"`
	} `json:"root"`
	Hostname string      `json:"hostname"`
	Mounts   []specMount `json:"mounts"`
	Linux    specLinux   `json:"linux"`
}

type specProcess struct {
	User struct {
		UID            int64   `json:"uid"`
		GID            int64   `json:"gid"`
		AdditionalGids []int64 `json:"additionalGids,omitempty"`
	} `json:"user"`
	Args            []string         `json:"args"`
	Env             []string         `json:"env"`
	Cwd             string           `json:"cwd"`
	Capabilities    specCapabilities `json:"capabilities"`
	Rlimits         []specRlimit     `json:"rlimits,omitempty"`
	NoNewPrivileges bool             `json:"noNewPrivileges"`
}

type specCapabilities struct {
	Bounding    []string `json:"bounding"`
	Effective   []string `json:"effective"`
	Inheritable []string `json:"inheritable"`
	Permitted   []string `json:"permitted"`
	Ambient     []string `json:"ambient"`
}

type specRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type specMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type,omitempty"`
	Source      string   `json:"source,omitempty"`
	Options     []string `json:"options,omitempty"`
}

type specLinux struct {
	Namespaces    []struct{ Type string } `json:"namespaces"`
	MaskedPaths   []string                `json:"maskedPaths"`
	ReadonlyPaths []string                `json:"readonlyPaths"`
	Seccomp       *specSeccomp            `json:"seccomp,omitempty"`
}

type specSeccomp struct {
	DefaultAction   string           `json:"defaultAction"`
	DefaultErrnoRet *uint            `json:"defaultErrnoRet,omitempty"`
	Architectures   []string         `json:"architectures"`
	Syscalls        []seccompSyscall `json:"syscalls"`
}

type seccompSyscall struct {
	Names    []string     `json:"names"`
	Action   string       `json:"action"`
	ErrnoRet *uint        `json:"errnoRet,omitempty"`
	Args     []seccompArg `json:"args,omitempty"`
}

type seccompArg struct {
	Index    uint   `json:"index"`
	Value    uint64 `json:"value"`
	ValueTwo uint64 `json:"valueTwo"`
	Op       string `json:"op"`
}

// defaultCaps is what a container runtime (containerd, CRI-O) grants a
// container that drops nothing; the chart's drop/add apply to it.
var defaultCaps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}

// capsOf applies a container's capabilities.drop and .add as the kubelet
// asks the runtime to.
func capsOf(drop, add []string) []string {
	norm := func(c string) string { return "CAP_" + strings.TrimPrefix(strings.ToUpper(c), "CAP_") }
	caps := []string{}
	if !slices.Contains(drop, "ALL") {
		for _, c := range defaultCaps {
			if !slices.ContainsFunc(drop, func(d string) bool { return norm(d) == c }) {
				caps = append(caps, c)
			}
		}
	}
	for _, a := range add {
		if !slices.Contains(caps, norm(a)) {
			caps = append(caps, norm(a))
		}
	}
	return caps
}

// The containers-common default profile (/usr/share/containers/seccomp.json,
// CRI-O's and Podman's RuntimeDefault), in its own format.
type defaultProfile struct {
	DefaultAction   string `json:"defaultAction"`
	DefaultErrnoRet *uint  `json:"defaultErrnoRet"`
	ArchMap         []struct {
		Architecture     string   `json:"architecture"`
		SubArchitectures []string `json:"subArchitectures"`
	} `json:"archMap"`
	Syscalls []struct {
		Names    []string     `json:"names"`
		Action   string       `json:"action"`
		ErrnoRet *uint        `json:"errnoRet"`
		Args     []seccompArg `json:"args"`
		Includes struct {
			Caps   []string `json:"caps"`
			Arches []string `json:"arches"`
		} `json:"includes"`
		Excludes struct {
			Caps   []string `json:"caps"`
			Arches []string `json:"arches"`
		} `json:"excludes"`
	} `json:"syscalls"`
}

const defaultProfilePath = "/usr/share/containers/seccomp.json"

// runtimeDefaultSeccomp turns the default profile into the OCI form for an
// amd64 container holding caps, as containers/common does for CRI-O: a
// rule is kept when the container has every capability it includes and
// none it excludes, and it names this architecture or none.
func runtimeDefaultSeccomp(t *testing.T, caps []string) *specSeccomp {
	t.Helper()
	b, err := os.ReadFile(defaultProfilePath)
	if err != nil {
		t.Fatalf("RuntimeDefault seccomp profile: %v (scripts/deps.sh image installs golang-github-containers-common)", err)
	}
	var p defaultProfile
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("%s: %v", defaultProfilePath, err)
	}
	out := &specSeccomp{DefaultAction: p.DefaultAction, DefaultErrnoRet: p.DefaultErrnoRet}
	for _, a := range p.ArchMap {
		if a.Architecture == "SCMP_ARCH_X86_64" {
			out.Architectures = append([]string{a.Architecture}, a.SubArchitectures...)
		}
	}
	has := func(c string) bool { return slices.Contains(caps, c) }
	for _, s := range p.Syscalls {
		if !allOf(s.Includes.Caps, has) || anyOf(s.Excludes.Caps, has) {
			continue
		}
		isAmd64 := func(a string) bool { return a == "amd64" || a == "x86_64" }
		if len(s.Includes.Arches) > 0 && !anyOf(s.Includes.Arches, isAmd64) || anyOf(s.Excludes.Arches, isAmd64) {
			continue
		}
		out.Syscalls = append(out.Syscalls, seccompSyscall{Names: s.Names, Action: s.Action, ErrnoRet: s.ErrnoRet, Args: s.Args})
	}
	if len(out.Architectures) == 0 || len(out.Syscalls) < 10 {
		t.Fatalf("%s: converted to %d architectures and %d rules", defaultProfilePath, len(out.Architectures), len(out.Syscalls))
	}
	return out
}

func allOf(xs []string, f func(string) bool) bool {
	for _, x := range xs {
		if !f(x) {
			return false
		}
	}
	return true
}

func anyOf(xs []string, f func(string) bool) bool { return slices.ContainsFunc(xs, f) }

// quantityBytes reads a Kubernetes quantity of the binary or plain form
// the chart uses for sizes ("64Mi", "1Gi", "1048576").
func quantityBytes(q string) (int64, error) {
	for suffix, mult := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30} {
		if n, ok := strings.CutSuffix(q, suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v * mult, err
		}
	}
	v, err := strconv.ParseInt(q, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("quantity %q: %w", q, err)
	}
	return v, nil
}
