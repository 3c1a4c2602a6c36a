package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
)

// checkAllowed returns the packages of the default image that are not on
// the allow-list, and the ones only asked-for extras brought in (allowed,
// since whoever built the image named them).
func checkAllowed(pkgs []pkg, allowed map[string]bool) (bad, extra []string) {
	for _, p := range pkgs {
		switch {
		case allowed[p.Name]:
		case p.Kind == "extra":
			extra = append(extra, p.Name)
		default:
			bad = append(bad, p.Name+" "+p.Version)
		}
	}
	sort.Strings(bad)
	sort.Strings(extra)
	return bad, extra
}

func runAllow(args []string) error {
	fs := flag.NewFlagSet("allow", flag.ContinueOnError)
	manifest := fs.String("manifest", "", "rootfs.sh's package manifest")
	list := fs.String("allowlist", "scripts/image/allowlist.txt", "allowed package names")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pkgs, err := readManifest(*manifest)
	if err != nil {
		return err
	}
	allowed, err := readList(*list)
	if err != nil {
		return err
	}
	bad, extra := checkAllowed(pkgs, allowed)
	if len(extra) > 0 {
		fmt.Fprintf(os.Stderr, "allow: %d packages brought in by the extra packages asked for, not on %s: %s\n",
			len(extra), *list, strings.Join(extra, " "))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d packages not on %s (review them, then add them with the reason):\n  %s",
			len(bad), *list, strings.Join(bad, "\n  "))
	}
	return nil
}
