package contention

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRun(t *testing.T) {
	rs := testenv.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Run(ctx, Config{Redis: &redis.Options{Addr: rs.Addr()}, Workers: 8, Grants: 20, Hold: 100 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.Grants != 160 || res.GrantsPerSec <= 0 || res.WaitP99 < res.WaitP50 || res.GapP99 < res.GapP50 {
		t.Fatalf("%+v", res)
	}
	if res.Gaps < res.Grants/2 {
		t.Fatalf("only %d hand-offs measured of %d grants", res.Gaps, res.Grants)
	}
	// The floor is 2 commands per grant (acquire and release scripts).
	if res.SentPerGrant < 2 || res.SentPerGrant > 6 {
		t.Fatalf("%.2f commands sent per grant", res.SentPerGrant)
	}
	if res.ServerCommands < res.CommandsSent {
		t.Fatalf("server %d < sent %d", res.ServerCommands, res.CommandsSent)
	}
	if n, err := rs.Do(ctx, "EXISTS", "dlock-bench"); err != nil || n.(int64) != 0 {
		t.Fatal(n, err)
	}
}

func TestRunInvalid(t *testing.T) {
	if _, err := Run(context.Background(), Config{}); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatal(err)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	if p := Percentile(ds, 50); p != 50 {
		t.Fatal(p)
	}
	if p := Percentile(ds, 99); p != 99 {
		t.Fatal(p)
	}
	if p := Percentile(ds, 100); p != 100 {
		t.Fatal(p)
	}
	if p := Percentile(nil, 50); p != 0 {
		t.Fatal(p)
	}
	if p := Percentile([]time.Duration{7}, 1); p != 7 {
		t.Fatal(p)
	}
}
