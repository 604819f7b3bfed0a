package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"runtime/debug"
	"slices"
	"strings"
)

// Lib is one lock implementation under test (a peer library, the spin loop,
// or one dlock variant). Every Lib entry becomes its own column/row in the
// results, so two configurations of the same library are two Libs.
type Lib interface {
	// Name is the short, unique label used in tables, flags and progress.
	Name() string
	// NewClient builds one simulated app server: its own connection pool
	// (its own Redis client) pointed at addr ("host:port").
	NewClient(addr string) (Client, error)
}

// Client is one app server's view of a lock library.
//
// Acquire blocks until the lock named key is held (waiting as the library
// waits) or ctx is done. The returned release must be called exactly once.
// Acquire may be called concurrently from many goroutines, for the same or
// for different keys.
type Client interface {
	Acquire(ctx context.Context, key string) (release func(context.Context) error, err error)
	Close() error
}

// Pinger is implemented by a Client that can send a PING through the very
// client (connection pool) its locks use: the round trip a G=1 pair is
// compared with.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Describer is optionally implemented by a Lib to document itself in the
// report: the Go module that implements it (its version is read from the
// binary's build info) and the settings the adapter uses.
type Describer interface {
	Module() string
	Settings() string
}

// rewaitCounter is implemented by a Lib whose adapter works around a
// library problem by abandoning a wait and waiting again; the count (a
// process-wide running total) is reported per run.
type rewaitCounter interface {
	Rewaits() int64
}

func rewaits(l Lib) int64 {
	if rc, ok := l.(rewaitCounter); ok {
		return rc.Rewaits()
	}
	return 0
}

// registry holds every Lib compiled into this binary, in registration order
// (init order, i.e. file-name order: lib_dlock.go first unless built with
// -tags nodlock). To add a library or a variant, write a type implementing Lib
// (and Describer) and call register from an init func; see lib_spin.go for
// the smallest example and lib_dlock.go (dlockVariants) for variants of one
// library built from options.
var registry []Lib

func register(l Lib) {
	for _, x := range registry {
		if x.Name() == l.Name() {
			panic("bench: duplicate lib name " + l.Name())
		}
	}
	registry = append(registry, l)
}

// selectLibs filters the registry by a comma-separated list of names
// (empty = all). Unknown names are returned as the second value.
func selectLibs(list string) (libs []Lib, unknown []string) {
	if strings.TrimSpace(list) == "" {
		return slices.Clone(registry), nil
	}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		found := false
		for _, l := range registry {
			if l.Name() == n {
				libs = append(libs, l)
				found = true
				break
			}
		}
		if !found {
			unknown = append(unknown, n)
		}
	}
	return libs, unknown
}

// rotate returns libs rotated left by i, so that every repetition runs the
// peers in a different order (no library is always first or last).
func rotate(libs []Lib, i int) []Lib {
	if len(libs) == 0 {
		return nil
	}
	i %= len(libs)
	out := make([]Lib, 0, len(libs))
	out = append(out, libs[i:]...)
	return append(out, libs[:i]...)
}

// moduleVersion reports the version of module path compiled into this
// binary ("(devel)"/replacement for the parent dlock module).
func moduleVersion(path string) string {
	if path == "" {
		return ""
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				if d.Replace.Version != "" {
					return d.Replace.Version
				}
				return d.Version + " => " + d.Replace.Path
			}
			return d.Version
		}
	}
	if bi.Main.Path == path {
		return bi.Main.Version
	}
	return "unknown"
}

// randomToken returns a 128-bit random hex token (what the seeds' spin loop
// and most Redis lock recipes use as the owner value).
func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on Linux (Go 1.24+ crashes instead)
	return hex.EncodeToString(b[:])
}
