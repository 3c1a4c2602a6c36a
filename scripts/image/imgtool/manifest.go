package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// pkg is one line of rootfs.sh's manifest: a Debian package unpacked into
// the image.
type pkg struct {
	Name, Version, Arch, SHA256, Kind, Source string
}

func readManifest(path string) ([]pkg, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []pkg
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != 6 {
			return nil, fmt.Errorf("%s:%d: %d fields, want 6", path, n, len(fields))
		}
		out = append(out, pkg{fields[0], fields[1], fields[2], fields[3], fields[4], fields[5]})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no packages", path)
	}
	return out, nil
}

// readList reads one name a line, # comments and blank lines skipped.
func readList(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			out[strings.Fields(line)[0]] = true
		}
	}
	return out, nil
}
