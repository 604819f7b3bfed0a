package dlock

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Where pub/sub is refused (an ACL without channels, as a locked-down
// managed Redis may have), Observe still delivers the leader, and a new
// one: it degrades to reading Redis now and then instead of staying
// silent for ever.
func TestElectionObserveWithoutPubSub(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	if _, err := r.Do(ctx, "ACL", "SETUSER", "nopubsub", "on", ">pw", "~*", "+@all", "-@pubsub"); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), Username: "nopubsub", Password: "pw",
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { rdb.Close() })
	c, err := New(rdb, withRecheck(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	a := newClient(t, r).Election("el:nopubsub")
	if _, err := a.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	obs := c.Election("el:nopubsub").Observe(ctx)
	next := func(want string) {
		t.Helper()
		select {
		case v := <-obs:
			if v != want {
				t.Fatalf("observed %q, want %q", v, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("nothing observed in 5s without pub/sub, want %q", want)
		}
	}
	next("a")
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	next("")
	if _, err := newClient(t, r).Election("el:nopubsub").Campaign(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	next("b")
}
