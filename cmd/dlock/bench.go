package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/contention"
)

func (a *app) benchCommand() *cobra.Command {
	var (
		cfg    contention.Config
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "bench [-w W] [-k K] [-l L] [--name NAME]",
		Short: "Measure the lock under contention on one hot key",
		Long: `bench runs dlock's contention benchmark against --redis: W goroutines, each
with a Client of its own (its own connection pool and pub/sub connection),
take one hot lock K times each and hold it for L. It checks that no two
holders overlap and prints:

  grants/s        grants per second over the run
  wait p50/p99    from the Lock call to the grant
  gap p50/p99     hand-off gap: from a holder starting its release to the next
                  grant, for grants whose waiter was already waiting
  cmds/grant      commands the clients sent per grant (a script call is one)
  server/grant    commands the server ran per grant (INFO commandstats delta,
                  commands inside scripts included, other clients' too)

Run it against a Redis that nothing else uses for clean command counts. It
needs one Redis server (not a Sentinel or Cluster URL).

--json prints one object, durations in milliseconds like inspect and demo:
  {"workers", "grants_per_worker", "hold_ms", "grants", "elapsed_ms",
   "grants_per_sec", "wait_p50_ms", "wait_p99_ms", "gap_p50_ms", "gap_p99_ms",
   "gaps", "commands_sent", "commands_per_grant", "server_commands",
   "server_commands_per_grant"}
server_commands and server_commands_per_grant are -1 when the server
refused INFO commandstats.

Exit codes: 0 done, 2 bad flags, 69 Redis unreachable, 77 Redis refused
the first PING (a wrong password, an ACL denial), 1 other failures
(including two holders at once, which would be a bug).`,
		Example: `  dlock bench
  dlock bench -w 100 -k 20 -l 0
  dlock --redis redis://10.0.0.5:6379 bench -w 16 -k 200 -l 1ms`,
		Args: wrapArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case cfg.Workers < 1:
				return usagef("--workers (-w) must be at least 1, got %d", cfg.Workers)
			case cfg.Grants < 1:
				return usagef("--grants (-k) must be at least 1, got %d", cfg.Grants)
			case cfg.Hold < 0:
				return usagef("--hold (-l) must not be negative, got %v", cfg.Hold)
			}
			if cfg.Name != "" {
				if err := checkName("--name", cfg.Name); err != nil {
					return err
				}
			}
			t, err := a.target()
			if err != nil {
				return err
			}
			opts, err := t.single("bench")
			if err != nil {
				return err
			}
			rdb, _, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			_ = rdb.Close()
			cfg.Redis = opts
			cfg.ClientOptions = a.clientOptions()
			res, err := contention.Run(cmd.Context(), cfg)
			if err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			if asJSON {
				return json.NewEncoder(a.stdout).Encode(benchJSONOf(res))
			}
			printBench(a.stdout, opts.Addr, res)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVarP(&cfg.Workers, "workers", "w", 16, "goroutines, each with its own Client (W)")
	fl.IntVarP(&cfg.Grants, "grants", "k", 100, "grants per worker (K)")
	fl.DurationVarP(&cfg.Hold, "hold", "l", time.Millisecond, "how long each grant is held (L)")
	fl.StringVar(&cfg.Name, "name", "", "lock name (default: a fresh dlock-bench:<nanoseconds>)")
	fl.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// benchJSON is bench --json's output: the same snake_case keys and
// millisecond durations as inspect and demo.
type benchJSON struct {
	Workers                int     `json:"workers"`
	GrantsPerWorker        int     `json:"grants_per_worker"`
	HoldMs                 float64 `json:"hold_ms"`
	Grants                 int     `json:"grants"`
	ElapsedMs              float64 `json:"elapsed_ms"`
	GrantsPerSec           float64 `json:"grants_per_sec"`
	WaitP50Ms              float64 `json:"wait_p50_ms"`
	WaitP99Ms              float64 `json:"wait_p99_ms"`
	GapP50Ms               float64 `json:"gap_p50_ms"`
	GapP99Ms               float64 `json:"gap_p99_ms"`
	Gaps                   int     `json:"gaps"`
	CommandsSent           int64   `json:"commands_sent"`
	CommandsPerGrant       float64 `json:"commands_per_grant"`
	ServerCommands         int64   `json:"server_commands"`
	ServerCommandsPerGrant float64 `json:"server_commands_per_grant"`
}

func benchJSONOf(r contention.Result) benchJSON {
	b := benchJSON{
		Workers: r.Workers, GrantsPerWorker: r.GrantsPerWorker, HoldMs: msf(r.Hold),
		Grants: r.Grants, ElapsedMs: msf(r.Elapsed), GrantsPerSec: round2(r.GrantsPerSec),
		WaitP50Ms: msf(r.WaitP50), WaitP99Ms: msf(r.WaitP99), GapP50Ms: msf(r.GapP50), GapP99Ms: msf(r.GapP99),
		Gaps: r.Gaps, CommandsSent: r.CommandsSent, CommandsPerGrant: round2(r.SentPerGrant),
		ServerCommands: r.ServerCommands, ServerCommandsPerGrant: round2(r.ServerPerGrant),
	}
	if r.ServerCommands < 0 {
		b.ServerCommandsPerGrant = -1
	}
	return b
}

func printBench(w io.Writer, addr string, r contention.Result) {
	fmt.Fprintf(w, "dlock bench on %s: %d workers x %d grants, hold %v\n\n", addr, r.Workers, r.GrantsPerWorker, r.Hold)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	d := func(x time.Duration) string { return x.Round(time.Microsecond).String() }
	server := "-"
	if r.ServerCommands >= 0 {
		server = fmt.Sprintf("%.2f", r.ServerPerGrant)
	}
	fmt.Fprintln(tw, "grants\tgrants/s\twait p50\twait p99\tgap p50\tgap p99\tcmds/grant\tserver/grant\t")
	fmt.Fprintf(tw, "%d\t%.0f\t%s\t%s\t%s\t%s\t%.2f\t%s\t\n", r.Grants, r.GrantsPerSec,
		d(r.WaitP50), d(r.WaitP99), d(r.GapP50), d(r.GapP99), r.SentPerGrant, server)
	_ = tw.Flush()
	fmt.Fprintf(w, "\n%d hand-offs measured for the gap; elapsed %v; no overlapping holders.\n", r.Gaps, r.Elapsed.Round(time.Millisecond))
}
