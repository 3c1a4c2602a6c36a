// Command imgtool packs and describes the provider's container image for
// make image (scripts/image/build.sh):
//
//	imgtool ref   -chart DIR                 the chart's default image reference
//	imgtool pack  -rootfs DIR -add DST=SRC … an OCI layout and a docker-load tarball
//	imgtool sbom  -manifest TSV …            SPDX 2.3 JSON of the unpacked packages
//	imgtool allow -manifest TSV -allowlist F fail on a package not on the list
//
// It is its own module so go-containerregistry stays out of the provider's
// go.mod.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: imgtool ref|pack|sbom|allow [flags]")
		os.Exit(2)
	}
	cmds := map[string]func([]string) error{
		"ref": runRef, "pack": runPack, "sbom": runSBOM, "allow": runAllow,
	}
	run, ok := cmds[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "imgtool: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
	if err := run(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "imgtool %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
