package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

var shared *testenv.Redis

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, "cmd/dlock/internal/quickstart", &shared, nil)) }

// readmeQuickstart returns the first Go code block of the README's
// Quickstart section.
func readmeQuickstart(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Quickstart\n")
	if !ok {
		t.Fatal("README.md has no Quickstart section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, code, ok := strings.Cut(sec, "```go\n")
	if !ok {
		t.Fatal("the Quickstart has no Go block")
	}
	code, _, ok = strings.Cut(code, "```")
	if !ok {
		t.Fatal("the Quickstart's Go block is not closed")
	}
	return code
}

// The README's Quickstart is this package's main.go from "package main" on
// (so it is a complete program that compiles).
func TestReadmeIsThisProgram(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, prog, _ := strings.Cut(string(src), "\npackage main\n")
	want := "package main\n" + prog
	if got := readmeQuickstart(t); got != want {
		t.Fatalf("README Quickstart and cmd/dlock/internal/quickstart/main.go differ; README has:\n%s\nmain.go has:\n%s", got, want)
	}
}

// The program runs against a real Redis: it takes both locks and leaves
// them free, with their fencing counters behind.
func TestQuickstartRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := shared.NewClient(t)
	if err := run(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"coupon:42", "stock:7"} {
		if n := rdb.Exists(ctx, name).Val(); n != 0 {
			t.Fatalf("%s left locked", name)
		}
		if tok, err := rdb.Get(ctx, keys.For(name).Fence).Uint64(); err != nil || tok == 0 {
			t.Fatalf("%s was never granted: %v %v", name, tok, err)
		}
	}
}
