package renew

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Hurry is called each time the Client's pub/sub channel is confirmed. A
// connection that flaps (confirmed, dropped, resubscribed after the hub's
// 10ms backoff, which every confirmation resets) calls it every few
// milliseconds, and each call renews every hold at once, the ones in
// flight again right after their call: the watchdog then renews every hold
// back to back for as long as the flapping lasts, one call per slot each
// time, instead of once a period. Nothing but the reconnect rate bounds it.
//
// Now Hurries take effect at least hurryGap (min(Period/4, 1s), the
// spacing of a failed renewal's retries) apart: every confirmation is
// still followed by a renewal sent after it, at most that much later.
// Before, one hold was renewed 200 times in these 3s.
func TestFlappingChannelDoesNotStormRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		calls := 0
		run := func(ctx context.Context, batch []*Entry, _ []int64) ([]int64, error) {
			time.Sleep(time.Millisecond) // one round trip
			mu.Lock()
			calls++
			mu.Unlock()
			out := make([]int64, len(batch))
			for i := range out {
				out[i] = Held
			}
			return out, nil
		}
		const period = 10 * time.Second
		r := New(Config{Period: period, Run: run})
		defer r.Stop()
		r.Add(&Entry{Key: "a", TTL: 3 * period, Holder: &holder{}}, time.Now().Add(period))
		const flapping = 2 * time.Second
		for end := time.Now().Add(flapping); time.Now().Before(end); {
			r.Hurry()
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		gap := min(period/4, time.Second)
		if limit := int((flapping+time.Second)/gap) + 1; calls > limit {
			t.Fatalf("%d renewals of one hold in %v of a flapping channel, want at most %d (one per %v)", calls, flapping+time.Second, limit, gap)
		}
	})
}
