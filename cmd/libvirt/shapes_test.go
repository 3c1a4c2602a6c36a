package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A shape the host cannot give stops bin/libvirt at startup, naming the
// type and the field (the test driver's host: network "default", a 64 MiB
// golden image, no domain capabilities to find OVMF in).
func TestShapeRefusedAtStartup(t *testing.T) {
	t.Parallel()
	node, err := filepath.Abs("../../backend/libvirt/testdata/node.xml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ typ, want string }{
		{`"network": [{"network": "nowhere"}]`, `--instance-types: instance type "bad": network[0]: no active libvirt network "nowhere" (active: default)`},
		{`"firmware": "uefi-secure"`, `--instance-types: probing host local for the machine shapes: domain capabilities`},
		{`"firmware": "efi"`, `instance type "bad": firmware "efi": want bios, uefi or uefi-secure`},
		{`"cpu": {"sockets": 2, "cores": 2, "threads": 1}`, `instance type "bad": cpu: sockets×cores×threads = 2×2×1 = 4, must equal vcpu 2`},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			t.Parallel()
			types := filepath.Join(t.TempDir(), "types.json")
			if err := os.WriteFile(types, []byte(`[{"name": "bad", "vcpu": 2, "memory_mib": 512, `+tc.typ+`}]`), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"--addr=127.0.0.1:0", "--metrics-addr=", "--provider=p", "--connect=test://" + node,
				"--image=golden.qcow2", "--storage-pool=bigfleet", "--network=default", "--instance-types=" + types}
			err := run(t.Context(), args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}
