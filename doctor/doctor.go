package doctor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
)

// MinVersion is the oldest Redis version dlock works with (see the package
// doc for why). A constant; safe for concurrent use.
const MinVersion = "6.2.0"

// The names of the checks, in the order a Report lists them. NameListing
// appears under a namespace only, NameCluster on a Cluster only.
// Constants; safe for concurrent use.
const (
	NameVersion     = "version"
	NameMode        = "mode"
	NameScripting   = "scripting"
	NamePubSub      = "pubsub"
	NameKeys        = "keys"
	NameEviction    = "eviction"
	NamePersistence = "persistence"
	NameReplicas    = "replicas"
	NameListing     = "listing"
	NameCluster     = "cluster"
)

// MaxNamespace is the longest namespace Options accepts, in bytes.
const MaxNamespace = keys.MaxNamespaceLen

// DefaultReplicaTimeout is the WAIT timeout used when Options.ReplicaAck
// is set and Options.ReplicaTimeout is not.
const DefaultReplicaTimeout = time.Second

// probeTTL is the TTL of the probe key: it outlives a crashed Check by
// this much at most.
const probeTTL = 10 * time.Second

// deliveryTimeout bounds the wait for the probe message to come back.
const deliveryTimeout = 3 * time.Second

var (
	// ErrUnreachable: Redis could not be reached, or did not answer the
	// first PING before ctx was done. The error Check returns wraps it
	// and the cause (a network error, or ctx's cause).
	ErrUnreachable = errors.New("doctor: Redis unreachable")
	// ErrInvalidArgument: a nil client or invalid Options, refused before
	// any network call.
	ErrInvalidArgument = errors.New("doctor: invalid argument")
)

// Status is the outcome of one check. The zero value is OK. A Status is a
// plain value; safe to copy and share.
type Status int

const (
	OK   Status = iota // nothing to do
	Warn               // dlock works, with a risk or an unknown to look at
	Fail               // dlock cannot hold locks safely (or at all) here
)

// String returns "ok", "warn" or "fail".
func (s Status) String() string {
	switch s {
	case OK:
		return "ok"
	case Warn:
		return "warn"
	case Fail:
		return "fail"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// MarshalText encodes s as its String, so JSON shows "ok", "warn", "fail".
func (s Status) MarshalText() ([]byte, error) {
	if s < OK || s > Fail {
		return nil, fmt.Errorf("doctor: unknown status %d", int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText decodes what MarshalText encodes.
func (s *Status) UnmarshalText(b []byte) error {
	switch string(b) {
	case "ok":
		*s = OK
	case "warn":
		*s = Warn
	case "fail":
		*s = Fail
	default:
		return fmt.Errorf("doctor: unknown status %q", b)
	}
	return nil
}

// Result is the outcome of one check: its Name (one of the Name
// constants), its Status and a one-line Detail saying what was found and
// why it matters. A plain value; safe to copy and to share read-only.
type Result struct {
	// Name is the check's name, one of the Name constants ("version", ...).
	Name string `json:"name"`
	// Status is the check's outcome: OK, Warn or Fail.
	Status Status `json:"status"`
	// Detail is one line: what was found, and why it matters.
	Detail string `json:"detail"`
}

// Report is what Check found, one Result per check in a fixed order. A
// plain value: safe for concurrent reads, not for a write concurrent with
// anything else.
type Report struct {
	// Checks holds one Result per check run, in the order the package doc
	// lists them (cluster only on a Cluster, listing only under a
	// namespace).
	Checks []Result `json:"checks"`
}

// Status returns the worst status in r: Fail if any check failed, else
// Warn if any warned, else OK.
func (r Report) Status() Status {
	worst := OK
	for _, c := range r.Checks {
		if c.Status > worst {
			worst = c.Status
		}
	}
	return worst
}

// Failed returns the checks that failed, in report order.
func (r Report) Failed() []Result {
	var out []Result
	for _, c := range r.Checks {
		if c.Status == Fail {
			out = append(out, c)
		}
	}
	return out
}

// Get returns the check named name, if r has it.
func (r Report) Get(name string) (Result, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Result{}, false
}

// Options says how dlock will use Redis. The zero value is the default
// layout without replica acknowledgement. A plain value, copied by Check.
type Options struct {
	// Namespace is the namespace dlock.WithNamespace is given, without
	// the separator: "svc" means every key and channel begins with
	// "svc:". Empty means the default layout: companion keys and channels
	// begin with "dlock:", release channels with "redisson_lock__channel:".
	// At most MaxNamespace bytes of ASCII letters, digits, '_', '.' and
	// '-', as dlock.WithNamespace accepts.
	Namespace string
	// ReplicaAck is the n of dlock.WithReplicaAck(n, timeout); 0 means
	// grants are not confirmed on replicas.
	ReplicaAck int
	// ReplicaTimeout is its timeout; 0 means DefaultReplicaTimeout.
	ReplicaTimeout time.Duration
}

// Validate returns an error wrapping ErrInvalidArgument when Check would
// refuse o, without any network call. Safe for concurrent use.
func (o Options) Validate() error {
	if o.Namespace != "" {
		// The library's own rule, so that doctor checks what WithNamespace
		// accepts.
		if _, err := keys.NewSpace(o.Namespace); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
	}
	if o.ReplicaAck < 0 {
		return fmt.Errorf("%w: ReplicaAck %d is negative", ErrInvalidArgument, o.ReplicaAck)
	}
	if o.ReplicaTimeout < 0 {
		return fmt.Errorf("%w: ReplicaTimeout %v is negative", ErrInvalidArgument, o.ReplicaTimeout)
	}
	return nil
}

// prefix is what every probe key and channel begins with.
func (o Options) prefix() string {
	if o.Namespace == "" {
		return "dlock:"
	}
	return o.Namespace + ":"
}

// Check probes the Redis behind rdb as dlock would use it with opts and
// returns the report. The error is nil when every check ran, whatever
// their outcome; otherwise it wraps ErrInvalidArgument (nothing was sent),
// ErrUnreachable (the first PING failed on the network or got no answer),
// or ctx's cause or a network error met after the first PING, with the
// checks that completed in the Report.
//
// Check returns as soon as ctx is done. It writes one key per master under
// the namespace (10s TTL, deleted at once), subscribes one connection to a
// probe channel and closes it; it changes no configuration. Safe for
// concurrent use, as rdb is: each call uses keys and channels of its own.
func Check(ctx context.Context, rdb redis.UniversalClient, opts Options) (Report, error) {
	if rdb == nil {
		return Report{}, fmt.Errorf("%w: nil client", ErrInvalidArgument)
	}
	if err := opts.Validate(); err != nil {
		return Report{}, err
	}
	if opts.ReplicaTimeout == 0 {
		opts.ReplicaTimeout = DefaultReplicaTimeout
	}
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	d := &doctor{rdb: rdb, opts: opts, id: hex.EncodeToString(idb[:])}
	d.cluster, _ = rdb.(*redis.ClusterClient)
	if err := d.run(ctx); err != nil {
		return d.report, err
	}
	return d.report, nil
}

// doctor is one Check call's state.
type doctor struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // nil unless rdb is one
	opts    Options
	id      string // random, names the probe key and channel
	report  Report
	nodes   []*node // the masters (one outside a Cluster)
}

func (d *doctor) add(name string, s Status, format string, args ...any) {
	d.report.Checks = append(d.report.Checks, Result{Name: name, Status: s, Detail: fmt.Sprintf(format, args...)})
}

// run runs the probes and fills d.report.
func (d *doctor) run(ctx context.Context) error {
	if err := d.reach(ctx); err != nil {
		return err
	}
	if err := d.probeNodes(ctx); err != nil {
		return err
	}
	d.checkVersion()
	if err := d.checkMode(ctx); err != nil {
		return err
	}
	d.checkScripting()
	if err := d.checkPubSub(ctx); err != nil {
		return err
	}
	acks, err := d.checkKeys(ctx)
	if err != nil {
		return err
	}
	d.checkEviction()
	d.checkPersistence()
	d.checkReplicas(acks)
	d.checkListing()
	if d.cluster != nil {
		d.checkCluster()
	}
	return nil
}

// reach sends the first PING: a network error or no answer is
// ErrUnreachable; a refusal (wrong password, say) is an error of its own.
func (d *doctor) reach(ctx context.Context) error {
	_, err := call(ctx, func(ctx context.Context) (string, error) { return d.rdb.Ping(ctx).Result() })
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("%w: no answer to PING before the context ended: %w", ErrUnreachable, err)
	case isReply(err):
		return fmt.Errorf("doctor: Redis refused PING: %w", err)
	}
	return fmt.Errorf("%w: %w", ErrUnreachable, err)
}

// call runs f and returns its outcome, or ctx's cause as soon as ctx is
// done; f then goes on in the background until go-redis returns (its read
// timeout, or the client's Close).
func call[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	var zero T
	if ctx.Err() != nil {
		return zero, context.Cause(ctx)
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f(ctx)
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, context.Cause(ctx)
	}
}

// isReply reports whether err is an error reply from Redis (the server
// answered), as opposed to a network or context error.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.ErrClosed)
}

// denied reports whether err is an ACL refusal.
func denied(err error) bool {
	return err != nil && isReply(err) && strings.HasPrefix(err.Error(), "NOPERM")
}

// unknownCommand reports whether err says the command does not exist
// (disabled or renamed, as managed services do).
func unknownCommand(err error) bool {
	return err != nil && isReply(err) && strings.HasPrefix(err.Error(), "ERR unknown command")
}

// short is err's text, cut to one line of at most 160 bytes.
func short(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 160 {
		i := 160
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = s[:i] + "..."
	}
	return s
}
