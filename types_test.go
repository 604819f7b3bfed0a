package dlock

import (
	"context"
	"errors"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/internal/lease"
	"github.com/dlock-dev/dlock/internal/tier"
)

// rootFiles parses the root package's source files (tests left out).
func rootFiles(t *testing.T) (*token.FileSet, []*ast.File) {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return fset, files
}

// Issue 32, item 3: go doc shows the public types with their fields. No
// exported type of the root package is an alias of a type of an internal
// package (go doc shows an alias as a bare line, without fields), every
// exported type, function and method (an interface's too) has a doc
// comment, every exported type's states its concurrency contract, and every
// exported field of an exported struct has a comment of its own.
func TestPublicTypesAreNotAliases(t *testing.T) {
	fset, files := rootFiles(t)
	for _, f := range files {
		internal := map[string]bool{} // import names of internal packages
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !strings.Contains(path, "/internal/") {
				continue
			}
			name := path[strings.LastIndex(path, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			internal[name] = true
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, s := range g.Specs {
				ts := s.(*ast.TypeSpec)
				if !ts.Name.IsExported() || !ts.Assign.IsValid() {
					continue
				}
				ast.Inspect(ts.Type, func(n ast.Node) bool {
					if sel, ok := n.(*ast.SelectorExpr); ok {
						if x, ok := sel.X.(*ast.Ident); ok && internal[x.Name] {
							t.Errorf("%s: type %s is an alias of %s.%s, an internal type", fset.Position(ts.Pos()), ts.Name.Name, x.Name, sel.Sel.Name)
						}
					}
					return true
				})
			}
		}
	}
	p, err := doc.NewFromFiles(fset, files, "github.com/dlock-dev/dlock")
	if err != nil {
		t.Fatal(err)
	}
	undocumented := func(what, text string) {
		if strings.TrimSpace(text) == "" {
			t.Errorf("%s has no doc comment", what)
		}
	}
	for _, f := range p.Funcs {
		undocumented(f.Name, f.Doc)
	}
	for _, ty := range p.Types {
		undocumented("type "+ty.Name, ty.Doc)
		for _, f := range append(ty.Funcs, ty.Methods...) {
			undocumented(ty.Name+"."+f.Name, f.Doc)
		}
		if !contract.MatchString(ty.Doc) {
			t.Errorf("type %s's doc comment does not state its concurrency contract", ty.Name)
		}
		if it, ok := ty.Decl.Specs[0].(*ast.TypeSpec).Type.(*ast.InterfaceType); ok {
			for _, m := range it.Methods.List {
				for _, n := range m.Names {
					if n.IsExported() && m.Doc == nil && m.Comment == nil {
						t.Errorf("method %s.%s has no comment", ty.Name, n.Name)
					}
				}
			}
		}
		st, ok := ty.Decl.Specs[0].(*ast.TypeSpec).Type.(*ast.StructType)
		if !ok {
			continue
		}
		for _, fl := range st.Fields.List {
			for _, n := range fl.Names {
				if n.IsExported() && fl.Doc == nil && fl.Comment == nil {
					t.Errorf("field %s.%s has no comment", ty.Name, n.Name)
				}
			}
		}
	}
}

// contract matches a type's doc comment that states its concurrency
// contract, as the sync package's types do: safe for concurrent use, or a
// plain value safe to copy and share.
var contract = regexp.MustCompile(`(?i)concurren|safe\s+to\s+copy|immutable`)

// The constants whose values the doc comments spell out, because go doc
// shows them only as the internal constants they stand for.
func TestDocumentedConstantValues(t *testing.T) {
	for got, want := range map[string]string{
		TypeLock: "lock", TypeElection: "election", TypeSemaphore: "semaphore", TypeLatch: "latch",
		BackendRedis: "redis", strconv.Itoa(MaxWaitersListed): "100",
	} {
		if got != want {
			t.Errorf("a documented constant is %q, its doc comment says %q", got, want)
		}
	}
}

// The public types that the engine's records are copied into field by
// field have the engine's fields, so that no field is dropped on the way.
// (Grant, LossError, Holder, Waiter and LockInfo convert as a whole: the
// compiler checks those.)
func TestPublicTypesHaveTheEnginesFields(t *testing.T) {
	kindType := reflect.TypeFor[Kind]()
	for _, pair := range [][2]reflect.Type{
		{reflect.TypeFor[Acquisition](), reflect.TypeFor[lease.Acquisition]()},
		{reflect.TypeFor[Release](), reflect.TypeFor[lease.Release]()},
		{reflect.TypeFor[FallbackRequest](), reflect.TypeFor[tier.Request]()},
	} {
		pub, eng := pair[0], pair[1]
		if pub.NumField() != eng.NumField() {
			t.Errorf("%v has %d fields, %v %d", pub, pub.NumField(), eng, eng.NumField())
			continue
		}
		for i := range pub.NumField() {
			pf, ef := pub.Field(i), eng.Field(i)
			same := pf.Type == ef.Type || (pf.Type == kindType && ef.Type == reflect.TypeFor[lease.Kind]())
			if pf.Name != ef.Name || !same {
				t.Errorf("%v field %d is %s %v, %v's is %s %v", pub, i, pf.Name, pf.Type, eng, ef.Name, ef.Type)
			}
		}
	}
}

// allocObserver hands out outcome functions made once.
type allocObserver struct {
	NopObserver
	acq func(Acquisition)
	rel func(Release)
}

func (o *allocObserver) AcquireStarted(context.Context, Kind, string) func(Acquisition) { return o.acq }
func (o *allocObserver) ReleaseStarted(context.Context, Kind, string) func(Release)     { return o.rel }

// Observers are called per lock call: turning the engine's records into
// the public types allocates nothing, and the observer sees every field.
func TestObserverConversionDoesNotAllocate(t *testing.T) {
	var got Acquisition
	var gotRel Release
	o := &allocObserver{acq: func(a Acquisition) { got = a }, rel: func(r Release) { gotRel = r }}
	a := observe(o)
	ctx := context.Background()
	cause := errors.New("cause")
	in := lease.Acquisition{Kind: lease.KindRead, Name: "n", Acquired: true, TimedOut: true, Err: cause, Waited: 3,
		Reentry: true, Backend: "b", Weight: 2}
	rin := lease.Release{Kind: lease.KindWrite, Name: "n", Final: true, Held: 4, Err: cause, Weight: 3}
	allocs := testing.AllocsPerRun(200, func() {
		a.AcquireDone(a.AcquireStarted(ctx, lease.KindRead, "n"), in)
		a.ReleaseDone(a.ReleaseStarted(ctx, lease.KindWrite, "n"), rin)
		a.Lost(lease.KindMutex, "n", cause)
	})
	if allocs != 0 {
		t.Errorf("a report through the adapter allocates %v times", allocs)
	}
	want := Acquisition{Kind: KindRead, Name: "n", Acquired: true, TimedOut: true, Err: cause, Waited: 3, Reentry: true, Backend: "b", Weight: 2}
	if got != want {
		t.Errorf("the observer saw %+v, want %+v", got, want)
	}
	if wantRel := (Release{Kind: KindWrite, Name: "n", Final: true, Held: 4, Err: cause, Weight: 3}); gotRel != wantRel {
		t.Errorf("the observer saw %+v, want %+v", gotRel, wantRel)
	}
	// An observer that asks for no outcome is not called back.
	if s := observe(NopObserver{}).AcquireStarted(ctx, lease.KindMutex, "n"); s != nil {
		t.Errorf("NopObserver's report started: %v", s)
	}
}
