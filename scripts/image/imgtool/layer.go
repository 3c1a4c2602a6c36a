package main

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// entry is one file of the layer: its path in the image and where its
// metadata and content come from on disk.
type entry struct {
	name string // relative, no leading slash; directories end in "/"
	src  string
	info fs.FileInfo
}

// collect walks rootfs and adds the extra files (image path → host path).
// Extra files are owned by root and keep their mode; their parent
// directories must exist in rootfs.
func collect(rootfs string, extra map[string]string) ([]entry, error) {
	var out []entry
	err := filepath.WalkDir(rootfs, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(rootfs, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := os.Lstat(path)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if info.IsDir() {
			name += "/"
		}
		out = append(out, entry{name: name, src: path, info: info})
		return nil
	})
	if err != nil {
		return nil, err
	}
	for dst, src := range extra {
		info, err := os.Stat(src)
		if err != nil {
			return nil, err
		}
		dst = strings.TrimPrefix(dst, "/")
		if _, err := os.Lstat(filepath.Join(rootfs, filepath.Dir(dst))); err != nil {
			return nil, fmt.Errorf("%s: parent directory not in the root filesystem: %w", dst, err)
		}
		out = append(out, entry{name: dst, src: src, info: rootOwned{info}})
	}
	// Byte order of the names: the same layer whatever the walk or the map
	// order, and a directory always before what it holds.
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// rootOwned reports a host file (the binary built by the caller) as
// owned by root, as the Dockerfile's COPY does.
type rootOwned struct{ fs.FileInfo }

func (rootOwned) Sys() any { return &syscall.Stat_t{} }

// layerStats describes what writeLayer wrote.
type layerStats struct {
	Files, Dirs, Symlinks int
	Bytes                 int64 // content of the regular files
}

// writeLayer writes the entries as an uncompressed tar with every time set
// to mtime and numeric owners only, so the same tree always gives the same
// bytes. Hard links are written as regular files (each path its own copy).
func writeLayer(w io.Writer, entries []entry, mtime time.Time) (layerStats, error) {
	var st layerStats
	tw := tar.NewWriter(w)
	for _, e := range entries {
		link := ""
		if e.info.Mode()&fs.ModeSymlink != 0 {
			var err error
			if link, err = os.Readlink(e.src); err != nil {
				return st, err
			}
		}
		hdr, err := tar.FileInfoHeader(e.info, link)
		if err != nil {
			return st, fmt.Errorf("%s: %w", e.name, err)
		}
		hdr.Name = e.name
		hdr.Uname, hdr.Gname = "", ""
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = mtime, time.Time{}, time.Time{}
		hdr.Format = tar.FormatPAX
		if sys, ok := e.info.Sys().(*syscall.Stat_t); ok {
			hdr.Uid, hdr.Gid = int(sys.Uid), int(sys.Gid)
		}
		switch {
		case e.info.IsDir():
			st.Dirs++
		case link != "":
			st.Symlinks++
		case e.info.Mode().IsRegular():
			st.Files++
			st.Bytes += e.info.Size()
		default:
			return st, fmt.Errorf("%s: unsupported file type %s", e.name, e.info.Mode().Type())
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return st, err
		}
		if e.info.Mode().IsRegular() {
			if err := copyFile(tw, e.src); err != nil {
				return st, fmt.Errorf("%s: %w", e.name, err)
			}
		}
	}
	return st, tw.Close()
}

func copyFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
