package wire

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// A script's SHA1 comes from Redis at its first use, in the round trip
// that resends it as EVAL, and is the one SCRIPT LOAD reports; from then on
// each call is one EVALSHA, and after SCRIPT FLUSH one EVALSHA and one EVAL.
// On the lone connection and through the batcher, for a script and for its
// variant.
func TestScriptSHAFromRedis(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, tc := range []struct {
		own     bool
		variant Variant
	}{{true, Variant{}}, {false, Variant{}}, {true, Variant{Namespace: "ns:"}}, {false, Variant{Namespace: "ns:"}}} {
		t.Run(fmt.Sprintf("own=%v,variant=%+v", tc.own, tc.variant), func(t *testing.T) {
			src := fmt.Sprintf("return ARGV[1] .. '%d'", i)
			base := NewScript(src).WithVariants(func(v Variant) string { return src + " .. '" + v.Namespace + "'" })
			s := base.For(tc.variant)
			if s.sha.known() {
				t.Fatal("a SHA1 is known before the first use")
			}
			w := New(rdb, time.Second, tc.own)
			defer w.Stop()
			if tc.own {
				for !w.LoneReady() {
					w.redial(w.lones[0])
					time.Sleep(10 * time.Millisecond)
				}
			}
			w.SetVariant(tc.variant)
			want := fmt.Sprintf("x%d%s", i, tc.variant.Namespace)
			run := func(evalsha, eval int64) {
				t.Helper()
				if err := r.ResetStats(ctx); err != nil {
					t.Fatal(err)
				}
				got, err := base.Run(ctx, w, []any{"k"}, "x").Text()
				if err != nil || got != want {
					t.Fatalf("Run = %q, %v; want %q", got, err, want)
				}
				st, err := r.CommandStats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if st["evalsha"] != evalsha || st["eval"] != eval {
					t.Fatalf("commands %v: want %d EVALSHA and %d EVAL", st, evalsha, eval)
				}
			}
			run(1, 2) // NOSCRIPT; the resend and the SHA1 in one round trip
			loaded, err := rdb.ScriptLoad(ctx, s.src.(string)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if s.sha.String() != loaded {
				t.Fatalf("SHA1 learned %q, SCRIPT LOAD says %q", s.sha, loaded)
			}
			run(1, 0)
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			run(1, 1)
			run(1, 0)
		})
	}
}

// A droppable call whose ctx is done before it is sent is not sent (a
// renewal its caller stopped waiting for); a plain Run call is sent all the
// same, and its reply discarded.
func TestRunDroppableIsNotSentOnceCtxIsDone(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := NewScript("return 1")
	w := New(rdb, time.Second, false)
	defer w.Stop()
	if err := s.Run(ctx, w, []any{"k"}).Err(); err != nil { // loads it
		t.Fatal(err)
	}
	done, stop := context.WithCancel(ctx)
	stop()
	for _, tc := range []struct {
		droppable bool
		want      int64
	}{{true, 0}, {false, 1}} {
		if err := r.ResetStats(ctx); err != nil {
			t.Fatal(err)
		}
		var cmdErr error
		if tc.droppable {
			cmdErr = s.RunDroppable(done, w, []any{"k"}).Err()
		} else {
			cmdErr = s.Run(done, w, []any{"k"}).Err()
		}
		// A droppable call fails at once. A plain one is sent, and its
		// caller may be handed its reply when the reply is in before the
		// caller looks at its ctx (a worker can answer it that fast).
		if cmdErr == nil && tc.droppable {
			t.Errorf("droppable=%v: no error with a done ctx", tc.droppable)
		}
		<-w.Drain()
		st, err := r.CommandStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st["evalsha"] != tc.want {
			t.Errorf("droppable=%v with a done ctx: %d EVALSHA sent, want %d", tc.droppable, st["evalsha"], tc.want)
		}
	}
}
