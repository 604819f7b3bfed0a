package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// unlock --force exits as the root help says: 77 when Redis refuses the
// release (an ACL denial, NOPERM) and 69 when Redis stops answering after
// the PING, not 1 with a bare go-redis error for both.
func TestUnlockRedisFailureCodes(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := context.Background()
	if _, err := srv.Do(ctx, "acl", "setuser", "noscript", "on", ">pw", "~*", "&*", "+@all", "-@scripting"); err != nil {
		t.Fatal(err)
	}
	r := dlockRun(t, nil, "--redis", "redis://noscript:pw@"+srv.Addr(), "unlock", "--force", "t-unlock-refused")
	wantCode(t, r, exitRefused)
	oneLineErr(t, r, "NOPERM")

	// CLIENT PAUSE WRITE: PING and the reading MULTI are answered, the
	// release script is held.
	if _, err := srv.Do(ctx, "CLIENT", "PAUSE", "30000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = srv.Do(context.Background(), "CLIENT", "UNPAUSE") })
	r = dlockRun(t, nil, "--redis", "redis://"+srv.Addr()+"?read_timeout=300ms&max_retries=-1", "unlock", "--force", "t-unlock-paused")
	wantCode(t, r, exitUnavailable)
	if !strings.Contains(r.stderr, srv.Addr()) {
		t.Fatalf("stderr does not name Redis: %q", r.stderr)
	}
}

// unlock --force keeps to --timeout: against a Redis that answers the PING
// and then holds the release (CLIENT PAUSE WRITE), with go-redis' default
// timeouts and retries (about 20 s before this bound), it exits 69 after
// --timeout and the Client's one-second Close, naming the bound. A bound
// that is not above zero is a usage error, before any connection.
func TestUnlockKeepsToTimeout(t *testing.T) {
	srv := testenv.StartRedis(t)
	r := dlockRun(t, nil, "--redis", "redis://"+srv.Addr(), "unlock", "--force", "--timeout", "0s", "t-unlock-zero")
	wantCode(t, r, exitUsage)
	usageErr(t, r, "--timeout must be above 0")

	if _, err := srv.Do(context.Background(), "CLIENT", "PAUSE", "30000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = srv.Do(context.Background(), "CLIENT", "UNPAUSE") })
	r = dlockRun(t, nil, "--redis", "redis://"+srv.Addr(), "unlock", "--force", "--timeout", "500ms", "t-unlock-bounded")
	wantCode(t, r, exitUnavailable)
	oneLineErr(t, r, "within --timeout 500ms")
	// Generous for a shared machine, and far below the 20 s that go-redis'
	// defaults took.
	if r.took > 10*time.Second {
		t.Fatalf("unlock --force --timeout 500ms took %v", r.took)
	}
}
