// Command shape prints the figures ARCHITECTURE.md keeps an eye on: the
// public face's size, its exported names, the longest function of the
// library module, and imports that point up the layers.
//
//	go run ./.ci/shape
//
// The layers, top to bottom, are listed in layers below; a package imports
// only packages of lower layers (or its own). Functions are counted in every
// module of the repository (tests and the test environment aside).
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

const module = "github.com/dlock-dev/dlock"

// layers, from the top: the public face, the kinds, the lease engine, the
// wire, and the leaves every layer may use.
var layers = [][]string{
	{"."},
	{"internal/kind", "internal/tier"},
	{"internal/lease"},
	{"internal/wire", "internal/notify", "internal/renew", "internal/shardsub"},
	{"internal/keys", "internal/lockcheck", "internal/discover"},
}

func layerOf(dir string) int {
	for i, l := range layers {
		for _, d := range l {
			if d == dir {
				return i
			}
		}
	}
	return -1
}

// maxFunc is the longest a function may be, in lines.
const maxFunc = 60

type fn struct {
	name    string
	lines   int
	library bool // in the library module (not a sub-module with its own go.mod)
}

func main() {
	fset := token.NewFileSet()
	rootLines, exported := 0, 0
	var fns []fn
	var upward []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testenv") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		if dir == "." {
			rootLines += fset.Position(f.End()).Line
			exported += countExported(f)
		}
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Body != nil {
				n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				fns = append(fns, fn{path + ":" + funcName(fd), n, inLibrary(dir)})
			}
		}
		from := layerOf(dir)
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if !strings.HasPrefix(p, module) {
				continue
			}
			to := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
			if to == "" {
				to = "."
			}
			if l := layerOf(to); from >= 0 && l >= 0 && l < from {
				upward = append(upward, path+" -> "+to)
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].lines > fns[j].lines })
	fmt.Printf("root non-test lines: %d\n", rootLines)
	fmt.Printf("root exported names: %d\n", exported)
	others := 0
	for _, f := range fns {
		switch {
		case f.lines <= maxFunc:
		case f.library:
			fmt.Printf("library function over %d lines: %s (%d)\n", maxFunc, f.name, f.lines)
		default:
			others++
		}
	}
	for _, f := range fns {
		if f.library {
			fmt.Printf("longest library function: %s (%d lines)\n", f.name, f.lines)
			break
		}
	}
	fmt.Printf("functions over %d lines in the other modules (CLI, integrations, bench): %d\n", maxFunc, others)
	fmt.Printf("imports pointing upward: %d\n", len(upward))
	for _, u := range upward {
		fmt.Println("  " + u)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// inLibrary reports whether dir belongs to the library module: no go.mod
// between it and the repository root.
func inLibrary(dir string) bool {
	for ; dir != "." && dir != ""; dir = filepath.Dir(dir) {
		if fileExists(filepath.Join(dir, "go.mod")) {
			return false
		}
	}
	return true
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if ix, ok := t.(*ast.IndexExpr); ok {
		t = ix.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// countExported counts the exported top-level names of f and the exported
// methods of its types.
func countExported(f *ast.File) int {
	n := 0
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() {
				if d.Recv != nil {
					if t := recvType(d); t != "" && !ast.IsExported(t) {
						continue
					}
				}
				n++
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						n++
					}
				case *ast.ValueSpec:
					for _, id := range s.Names {
						if id.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n
}

func recvType(fd *ast.FuncDecl) string {
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
