package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// CeilingConfig is scenario (c): what the server and the loopback allow.
type CeilingConfig struct {
	PingDuration time.Duration // sequential PINGs from Go for this long
	BenchBin     string        // redis-benchmark path ("" = skip)
	BenchN       int           // -n
	BenchClients []int         // -c values
}

// BenchLine is one line of redis-benchmark -q output.
type BenchLine struct {
	Clients int     `json:"clients"`
	Test    string  `json:"test"`
	RPS     float64 `json:"rps"`
	P50Ms   float64 `json:"p50_ms"`
}

type CeilingRun struct {
	Rep         int         `json:"rep"`
	GoPings     int         `json:"go_pings"`
	GoPingP50Us float64     `json:"go_ping_p50_us"`
	GoPingP99Us float64     `json:"go_ping_p99_us"`
	GoPingPerS  float64     `json:"go_pings_per_s"`
	Bench       []BenchLine `json:"redis_benchmark"`
}

func runCeiling(ctx context.Context, srv *redisServer, cfg CeilingConfig, rep int) (CeilingRun, error) {
	r := CeilingRun{Rep: rep}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	for range 100 {
		if err := rdb.Ping(ctx).Err(); err != nil {
			return r, err
		}
	}
	h := new(hist)
	begin := time.Now()
	end := begin.Add(cfg.PingDuration)
	for {
		t0 := time.Now()
		if !t0.Before(end) {
			break
		}
		if err := rdb.Ping(ctx).Err(); err != nil {
			return r, err
		}
		h.Record(time.Since(t0))
		r.GoPings++
	}
	r.GoPingPerS = float64(r.GoPings) / time.Since(begin).Seconds()
	r.GoPingP50Us = us(h.Quantile(0.5))
	r.GoPingP99Us = us(h.Quantile(0.99))

	if cfg.BenchBin == "" {
		return r, nil
	}
	for _, c := range cfg.BenchClients {
		lines, err := runRedisBenchmark(ctx, cfg.BenchBin, srv.Port, cfg.BenchN, c)
		if err != nil {
			return r, err
		}
		r.Bench = append(r.Bench, lines...)
	}
	return r, nil
}

var benchLineRE = regexp.MustCompile(`([A-Za-z_]+): ([0-9.]+) requests per second(?:, p50=([0-9.]+) msec)?`)

func runRedisBenchmark(ctx context.Context, bin string, port, n, clients int) ([]BenchLine, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-h", "127.0.0.1", "-p", strconv.Itoa(port),
		"-q", "-n", strconv.Itoa(n), "-c", strconv.Itoa(clients), "-t", "ping,set")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("redis-benchmark -c %d: %v: %s", clients, err, lastOutput(string(out)))
	}
	lines := parseRedisBenchmark(string(out), clients)
	if len(lines) == 0 {
		return nil, fmt.Errorf("redis-benchmark -c %d: no result in output %q", clients, lastOutput(string(out)))
	}
	return lines, nil
}

// lastOutput is the last non-blank line of redis-benchmark's output (its
// progress lines end in '\r').
func lastOutput(out string) string {
	lines := strings.FieldsFunc(out, func(r rune) bool { return r == '\n' || r == '\r' })
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return ""
}

// parseRedisBenchmark parses `redis-benchmark -q` output; progress updates
// are separated by '\r', final results end with '\n'.
func parseRedisBenchmark(out string, clients int) []BenchLine {
	var res []BenchLine
	for _, line := range strings.FieldsFunc(out, func(r rune) bool { return r == '\n' || r == '\r' }) {
		m := benchLineRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		rps, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			continue
		}
		var p50 float64
		if m[3] != "" {
			p50, _ = strconv.ParseFloat(m[3], 64)
		}
		res = append(res, BenchLine{Clients: clients, Test: m[1], RPS: rps, P50Ms: p50})
	}
	return res
}
