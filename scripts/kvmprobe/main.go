// Command kvmprobe tells whether a device node is a real KVM: it opens it
// read-write and asks KVM_GET_API_VERSION, which only the kvm module
// answers (a node made with mknod where no module is loaded does not).
// scripts/host-kinds.sh runs it as root to decide whether the machine has
// KVM at all, before it changes /dev/kvm.
//
//	go run ./scripts/kvmprobe [/dev/kvm]
//
// Exit 0 and "KVM API version 12" when KVM answers; exit 1 and the reason
// when it does not.
package main

import (
	"fmt"
	"os"
	"syscall"
)

// kvmGetAPIVersion is _IO(KVMIO, 0x00) with KVMIO 0xAE (linux/kvm.h).
const kvmGetAPIVersion = 0xAE00

func main() {
	path := "/dev/kvm"
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		fmt.Println("no KVM:", err)
		os.Exit(1)
	}
	defer f.Close()
	v, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), kvmGetAPIVersion, 0)
	if errno != 0 {
		fmt.Printf("no KVM: %s: KVM_GET_API_VERSION: %v\n", path, errno)
		os.Exit(1)
	}
	fmt.Printf("KVM API version %d\n", v)
}
