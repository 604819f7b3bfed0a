package contention

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Percentile returns the p-th percentile (0 < p <= 100, nearest rank) of ds,
// or 0 when ds is empty. It sorts ds in place. Not safe for concurrent use
// on the same slice.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	if !sort.SliceIsSorted(ds, func(i, j int) bool { return ds[i] < ds[j] }) {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	}
	rank := int(p/100*float64(len(ds)) + 0.999999)
	rank = min(max(rank, 1), len(ds))
	return ds[rank-1]
}

// CommandCounter is a go-redis hook that counts the commands a client sends:
// every command of a call or a pipeline, EVALSHA and EVAL included (a script
// counts as one command however many it runs on the server). It does not see
// the connection handshake or the pub/sub connection's SUBSCRIBE commands.
// Add it to every client with AddHook; it is safe for concurrent use.
type CommandCounter struct {
	n atomic.Int64
}

// Count returns the number of commands counted so far. Safe for concurrent
// use.
func (c *CommandCounter) Count() int64 { return c.n.Load() }

// DialHook implements redis.Hook; safe for concurrent use.
func (c *CommandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook; the returned hook is safe for
// concurrent use.
func (c *CommandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook; the returned hook is safe for
// concurrent use.
func (c *CommandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// ServerCommands returns the total number of commands the server has run
// according to INFO commandstats: commands run by scripts (redis.call) count
// under their own names too. The INFO call that asks is not counted. Safe for
// concurrent use.
func ServerCommands(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	s, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		name, val, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(val, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err == nil {
					total += n
				}
			}
		}
	}
	return total, nil
}
