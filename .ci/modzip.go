//go:build ignore

// modzip writes the module zip of one module of a source tree, in the layout
// the go command expects from a module proxy: every file is stored under
// "<module path>@<version>/", and the tree is filtered the way the go command
// filters a module: version-control directories, vendor directories, nested
// modules (directories with a go.mod of their own) and anything that is not a
// regular file (symlinks) are left out. It uses only the standard library, so
// it runs without downloading anything.
//
// Used by .ci/install-test.sh:
//
//	go run modzip.go -dir DIR -module PATH -version vX.Y.Z -o OUT.zip
package main

import (
	"archive/zip"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	dir := flag.String("dir", "", "the module's root directory (holds its go.mod)")
	mod := flag.String("module", "", "module path")
	version := flag.String("version", "", "module version, e.g. v0.1.0")
	out := flag.String("o", "", "zip file to write")
	flag.Parse()
	if *dir == "" || *mod == "" || *version == "" || *out == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	n, err := write(*dir, *mod+"@"+*version+"/", *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "modzip:", err)
		os.Exit(1)
	}
	fmt.Printf("modzip: %s: %d files\n", *out, n)
}

func write(root, prefix, out string) (int, error) {
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return 0, fmt.Errorf("%s is not a module root: %w", root, err)
	}
	f, err := os.Create(out)
	if err != nil {
		return 0, err
	}
	zw := zip.NewWriter(f)
	n := 0
	// WalkDir visits names in lexical order, so the zip is reproducible.
	werr := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == root {
				return nil
			}
			switch d.Name() {
			case ".git", ".hg", ".svn", ".bzr", "vendor":
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module: not part of this one
			}
			return nil
		}
		if !d.Type().IsRegular() || d.Name() == ".git" {
			return nil // a symlink, or a work tree's pointer to its git directory
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		name := prefix + filepath.ToSlash(rel)
		if strings.Contains(name, "\\") {
			return fmt.Errorf("%s: backslash in file name", rel)
		}
		n++
		return add(zw, name, path)
	})
	if werr == nil {
		werr = zw.Close()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return n, werr
}

func add(zw *zip.Writer, name, path string) error {
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	h := &zip.FileHeader{Name: name, Method: zip.Deflate}
	// A fixed time: the go command ignores it, and the zip stays the same
	// from one run to the next.
	h.Modified = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	w, err := zw.CreateHeader(h)
	if err != nil {
		return err
	}
	_, err = io.Copy(w, src)
	return err
}
