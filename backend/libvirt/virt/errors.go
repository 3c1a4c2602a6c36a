package virt

import (
	"errors"
	"fmt"

	"libvirt.org/go/libvirt"
)

// Code returns the libvirt error number carried by err (through any
// wrapping), or false if err did not come from libvirt. Every decision on a
// libvirt failure goes through here, so classification happens once.
func Code(err error) (libvirt.ErrorNumber, bool) {
	var le libvirt.Error
	if errors.As(err, &le) {
		return le.Code, true
	}
	return 0, false
}

// IsCode reports whether err is a libvirt error with one of the codes.
func IsCode(err error, codes ...libvirt.ErrorNumber) bool {
	c, ok := Code(err)
	if !ok {
		return false
	}
	for _, want := range codes {
		if c == want {
			return true
		}
	}
	return false
}

// Message is libvirt's own text of err (without the Go binding's
// "virError(Code=..)" wrapper), or err.Error() for anything else.
func Message(err error) string {
	var le libvirt.Error
	if errors.As(err, &le) && le.Message != "" {
		return le.Message
	}
	return err.Error()
}

// Version renders libvirt's major*1e6 + minor*1e3 + release.
func Version(v uint32) string {
	return fmt.Sprintf("%d.%d.%d", v/1000000, v/1000%1000, v%1000)
}
