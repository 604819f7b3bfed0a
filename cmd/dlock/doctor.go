package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlock-dev/dlock/doctor"
)

// envNamespace names the environment variable that gives --namespace its
// default.
const envNamespace = "DLOCK_NAMESPACE"

// doctorTimeout is --timeout's default: the whole check, after the PING.
const doctorTimeout = 15 * time.Second

// doctorJSON is doctor --json's output.
type doctorJSON struct {
	Redis     string          `json:"redis"`     // where, never a password
	Namespace string          `json:"namespace"` // "" for the default layout
	Status    doctor.Status   `json:"status"`    // the worst check's
	Checks    []doctor.Result `json:"checks"`
}

func (a *app) doctorCommand() *cobra.Command {
	var (
		opts    doctor.Options
		asJSON  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Tell whether this Redis can hold locks safely",
		Long: `doctor checks the Redis that --redis names as dlock would use it, with
the user in the URL and the --namespace, and prints one line per check,
marked ok, warn or fail:

  version      the server version against dlock's minimum, ` + doctor.MinVersion + `
  mode         standalone, Sentinel or Cluster; sharded pub/sub (7.0+)
  scripting    EVAL and EVALSHA allowed for this user (dlock runs scripts)
  pubsub       SUBSCRIBE and PUBLISH allowed on dlock's channels
  keys         SET with a TTL and DEL allowed under the namespace
  eviction     maxmemory with a policy other than noeviction fails: lock
               keys carry TTLs, so even volatile-* policies evict held
               locks, and an evicted lock gets a second holder
  persistence  neither RDB nor AOF warns: a restart empties every lock
  replicas     connected replicas; with --replica-ack N, whether a write
               reaches N of them (dlock.WithReplicaAck)
  listing      with --namespace: warns while this user may run PUBSUB
               CHANNELS, PUBSUB SHARDCHANNELS or SCAN, which list other
               tenants' lock names and client ids whatever the ACL patterns
  cluster      on a Cluster, every master answers

What this user may not read (INFO or CONFIG refused by an ACL or a managed
service) is a warn, never a fail. doctor writes one probe key per master
(10s TTL, deleted at once) and subscribes to one probe channel; it changes
no configuration.

--namespace NS checks the layout of dlock.WithNamespace(NS): every key and
channel begins with "NS:". Without it, the default layout: companion keys
and channels under "dlock:", release channels "redisson_lock__channel:{...}".

Exit codes: 0 nothing failed (warnings allowed), 1 a check failed,
2 bad flags or namespace, 69 Redis unreachable or stopped answering within
--timeout, 77 Redis refused the first PING (a wrong password, an ACL
denial).`,
		Example: `  dlock doctor
  dlock --redis redis://svc:pw@redis.internal:6379 doctor --namespace svc
  DLOCK_NAMESPACE=svc dlock doctor --json
  dlock doctor --replica-ack 1 --replica-timeout 500ms`,
		Args: wrapArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Namespace = a.namespace // the persistent --namespace
			if err := opts.Validate(); err != nil {
				return usagef("%s", strings.TrimPrefix(err.Error(), "doctor: invalid argument: "))
			}
			if timeout <= 0 {
				return usagef("--timeout must be positive, got %v", timeout)
			}
			if opts.ReplicaAck > 0 && opts.ReplicaTimeout >= timeout {
				// The WAIT would outlive the check, which would blame Redis.
				return usagef("--replica-timeout %v must be below --timeout %v", opts.ReplicaTimeout, timeout)
			}
			rdb, t, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer rdb.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			report, err := doctor.Check(ctx, rdb, opts)
			switch {
			case errors.Is(err, doctor.ErrInvalidArgument):
				return usageError{err}
			case errors.Is(err, doctor.ErrUnreachable):
				return exitf(exitUnavailable, "Redis at %s: %v", t.where(), err)
			case errors.Is(err, context.DeadlineExceeded):
				return exitf(exitUnavailable, "Redis at %s stopped answering: the checks did not end within --timeout %v", t.where(), timeout)
			case err != nil:
				return err
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(doctorJSON{Redis: t.where(), Namespace: opts.Namespace, Status: report.Status(), Checks: report.Checks}); err != nil {
					return err
				}
			} else {
				for _, c := range report.Checks {
					fmt.Fprintf(a.stdout, "%-4s  %-11s  %s\n", c.Status, c.Name, c.Detail)
				}
				if report.Status() != doctor.Fail {
					// The verdict and the server, for a reader; stdout
					// stays one line per check, for scripts.
					fmt.Fprintf(a.stderr, "doctor: Redis at %s: %s\n", t.where(), verdict(report))
				}
			}
			if failed := report.Failed(); len(failed) > 0 {
				var names []string
				for _, c := range failed {
					names = append(names, c.Name)
				}
				return exitf(exitFailure, "%d check(s) failed: %s", len(failed), strings.Join(names, ", "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.IntVar(&opts.ReplicaAck, "replica-ack", 0, "check that a write reaches N replicas, as dlock.WithReplicaAck(N, timeout) needs")
	f.DurationVar(&opts.ReplicaTimeout, "replica-timeout", doctor.DefaultReplicaTimeout, "the timeout of --replica-ack")
	f.DurationVar(&timeout, "timeout", doctorTimeout, "bound on the whole check after the first PING")
	return cmd
}

// verdict sums up a report that did not fail: every check ok, or how many
// warned and which.
func verdict(r doctor.Report) string {
	var warned []string
	for _, c := range r.Checks {
		if c.Status == doctor.Warn {
			warned = append(warned, c.Name)
		}
	}
	if len(warned) == 0 {
		return fmt.Sprintf("all %d checks ok", len(r.Checks))
	}
	return fmt.Sprintf("usable; %d of %d checks warn: %s", len(warned), len(r.Checks), strings.Join(warned, ", "))
}
