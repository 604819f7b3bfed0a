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

Run it against a Redis that nothing else uses for clean command counts.`,
		Example: `  dlock bench
  dlock bench -w 100 -k 20 -l 0
  dlock --redis redis://10.0.0.5:6379 bench -w 16 -k 200 -l 1ms`,
		Args: wrapArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Workers < 1 || cfg.Grants < 1 || cfg.Hold < 0 {
				return usagef("-w and -k must be at least 1 and -l not negative")
			}
			rdb, opts, err := a.connect(cmd.Context())
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
				return json.NewEncoder(a.stdout).Encode(res)
			}
			printBench(a.stdout, opts.Addr, res)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVarP(&cfg.Workers, "workers", "w", 16, "goroutines, each with its own Client (W)")
	fl.IntVarP(&cfg.Grants, "grants", "k", 100, "grants per worker (K)")
	fl.DurationVarP(&cfg.Hold, "hold", "l", time.Millisecond, "how long each grant is held (L)")
	fl.StringVar(&cfg.Name, "name", "", "lock name (default: a fresh dlock:bench:<n>)")
	fl.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
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
