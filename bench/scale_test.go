//go:build !nodlock

package main

import (
	"io"
	"testing"
	"time"
)

// TestScaleSmall runs scenario (d) at a small size: the code path, the
// accounting and the clean-up (goleak in TestMain), not the numbers.
func TestScaleSmall(t *testing.T) {
	srv := startTestRedis(t)
	ctx := testCtx(t)
	cfg := scaleConfig{Held: 300, Watchdog: 300 * time.Millisecond, Waiters: 200, Names: 20, Settle: 200 * time.Millisecond}
	res, err := runScale(ctx, srv, cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Violations != 0 || res.Errors != 0 {
		t.Fatalf("violations %d errors %d (%s)", res.Violations, res.Errors, res.FirstError)
	}
	if res.Grants != cfg.Waiters {
		t.Errorf("grants %d, want %d", res.Grants, cfg.Waiters)
	}
	// Renewals must have happened and kept every lock alive.
	if res.HeldCommands <= 0 || res.CmdsPerLockPeriod <= 0 {
		t.Errorf("no renewal traffic: %d commands", res.HeldCommands)
	}
	if res.KeysAliveAfter != int64(cfg.Held) {
		t.Errorf("%d of %d locks alive after %v", res.KeysAliveAfter, cfg.Held, cfg.window())
	}
	if res.GoroutinesPerWaiter < 1 || res.WakeP50Ms <= 0 || res.WakeP99Ms < res.WakeP50Ms {
		t.Errorf("implausible: %+v", res)
	}
}
