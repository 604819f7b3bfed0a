package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/keys"
)

// Exit codes shared by the commands. run also passes CMD's own code through.
const (
	exitOK          = 0
	exitFailure     = 1  // a failure not listed below
	exitUsage       = 2  // bad flags, arguments or URL
	exitNotLock     = 65 // unlock --force: NAME is not a lock, left intact (sysexits EX_DATAERR)
	exitUnavailable = 69 // Redis could not be reached (sysexits EX_UNAVAILABLE)
	exitNotAcquired = 75 // run: the lock was not acquired within --wait (EX_TEMPFAIL)
	exitLost        = 76 // run: the lock was lost while CMD ran
	exitRefused     = 77 // Redis answered with an error: a wrong password, an ACL denial (EX_NOPERM)
)

// DefaultRedisURL is used when neither --redis nor DLOCK_REDIS_URL is set
// (a constant).
const DefaultRedisURL = "redis://127.0.0.1:6379"

// envRedisURL names the environment variable that replaces the default URL.
const envRedisURL = "DLOCK_REDIS_URL"

// pingTimeout bounds the PING every command sends before doing any work.
const pingTimeout = 3 * time.Second

// exitError carries an exit code and a one-line message ("" prints nothing).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func exitf(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// app holds what every command shares.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	lookupEnv      func(string) (string, bool)

	redisURL  string
	namespace string // --namespace: dlock.WithNamespace's, "" for none
	verbose   bool
}

// Main runs the dlock command line with args (without the program name) and
// returns the process exit code. It is the whole program; main only calls it.
// Not safe for concurrent use: it sets go-redis's process-wide logger and,
// for run, the process's signal handling.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, lookupEnv: lookupEnv}
	// go-redis logs dial failures itself; dlock reports them in one line.
	redis.SetLogger(redisLogger{a})
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(context.Background())
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, "dlock: "+oneLine(ee.msg))
		}
		return ee.code
	}
	code := exitFailure
	if errors.Is(err, dlock.ErrInvalidArgument) || isUsage(err) {
		code = exitUsage
	}
	fmt.Fprintln(stderr, "dlock: "+oneLine(err.Error()))
	if isUsage(err) {
		fmt.Fprintln(stderr, "Run 'dlock --help' for usage.")
	}
	return code
}

// maxMessage caps a message line (in bytes): an error that quotes a huge
// input must not become a 10 KB line.
const maxMessage = 400

// oneLine makes s one line of at most maxMessage bytes.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "dlock: ")
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxMessage {
		s = truncate(s, maxMessage) + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return s
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// shortName quotes a lock name for messages, cut to 60 bytes.
func shortName(name string) string {
	if len(name) <= 60 {
		return strconv.Quote(name)
	}
	return strconv.Quote(truncate(name, 60)) + fmt.Sprintf("... (%d bytes)", len(name))
}

// checkName validates a lock name given as what ("NAME", "--name") before
// any network call, naming it without echoing a huge one.
func checkName(what, name string) error {
	err := keys.Validate(name)
	switch {
	case err == nil:
		return nil
	case name == "":
		return usagef("%s is empty: a lock name has 1 to %d bytes", what, keys.MaxNameLen)
	case len(name) > keys.MaxNameLen:
		return usagef("%s %s is too long: %d bytes, the limit is %d", what, shortName(name), len(name), keys.MaxNameLen)
	case !utf8.ValidString(name):
		return usagef("%s %s is not valid UTF-8", what, shortName(name))
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return usagef("%s %s holds a control character", what, shortName(name))
	case strings.HasPrefix(name, keys.ReservedPrefix):
		return usagef("%s %s begins with %q, which only dlock's own keys do", what, shortName(name), keys.ReservedPrefix)
	}
	return usagef("%s %s: contains '}' outside a Redis hash tag {...}", what, shortName(name))
}

// usageError marks errors about the command line itself.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func isUsage(err error) bool {
	var u usageError
	// cobra's own "unknown command" errors are not typed.
	return errors.As(err, &u) || strings.HasPrefix(err.Error(), "unknown command")
}

// redisLogger passes go-redis's own log lines to stderr with --verbose only.
type redisLogger struct{ a *app }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	if l.a.verbose {
		fmt.Fprintf(l.a.stderr, "go-redis: "+format+"\n", v...)
	}
}

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// wrapArgs makes an argument validator's error a usage error.
func wrapArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

func (a *app) rootCommand() *cobra.Command {
	def := DefaultRedisURL
	if v, ok := a.lookupEnv(envRedisURL); ok && v != "" {
		def = v
	}
	root := &cobra.Command{
		Use:   "dlock",
		Short: "Distributed locks on Redis, from the shell",
		Long: `dlock operates the locks of the dlock library (Redisson-compatible reentrant
locks on Redis): hold a lock while a command runs, inspect and break locks,
watch them live in a browser, and run the coupon demo and the contention
benchmark.

Every command that talks to Redis first checks that it answers PING; the
server comes from --redis, else $DLOCK_REDIS_URL, else ` + DefaultRedisURL + `.

` + redisURLHelp + `

A lock NAME is 1 to ` + strconv.Itoa(keys.MaxNameLen) + ` bytes of UTF-8 (longer names are refused before
any network call) without control characters; a '}' may only close a Redis
hash tag, as in {order:42}; names that begin with "` + keys.ReservedPrefix + `" are dlock's own keys.
A --namespace is ASCII letters, digits, '_', '.' and '-'.

Exit codes (each command's --help lists its own):
  0    done
  1    a failure not listed here
  2    bad flags, arguments, lock name or Redis URL
  65   unlock --force: NAME is not a lock (left as it is)
  69   Redis could not be reached (no answer), or answered that it cannot
       serve now (LOADING, BUSY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN)
  75   run: the lock was not acquired within --wait
  76   run: the lock was lost while CMD ran
  77   Redis refused: a wrong password (WRONGPASS), none given (NOAUTH), an
       ACL denial (NOPERM) or another error reply, quoted in the message
  run also exits with CMD's own code.`,
		Example: `  # See the race a lock prevents, on an embedded Redis (nothing to install):
  dlock demo
  dlock demo --no-lock

  # Hold a lock while a job runs, on whichever machine gets it first:
  dlock --redis redis://redis.internal:6379 run nightly-report -- ./report.sh

  # Who holds it, and who waits?
  dlock inspect nightly-report`,
		Version:       versionString(),
		SilenceUsage:  true,
		SilenceErrors: true,
		// Completion commands are not part of dlock's interface.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.PersistentFlags().StringVar(&a.redisURL, "redis", def, "Redis URL: redis://host:port[/db], ?master_name= for Sentinel, ?addr= for Cluster seeds (env "+envRedisURL+")")
	// The help shows the default: $DLOCK_REDIS_URL's, password hidden.
	root.PersistentFlags().Lookup("redis").DefValue = redactURL(normalizeURL(def))
	root.PersistentFlags().BoolVarP(&a.verbose, "verbose", "v", false, "log the library's warnings and debug messages to stderr")
	nsDef, _ := a.lookupEnv(envNamespace)
	root.PersistentFlags().StringVar(&a.namespace, "namespace", nsDef, "the namespace of the locks (dlock.WithNamespace: every key and channel begins with NS:); names are given without it (env "+envNamespace+")")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if a.namespace == "" {
			return nil
		}
		if _, err := keys.NewSpace(a.namespace); err != nil {
			return exitf(exitUsage, "dlock: --namespace: %v", err)
		}
		return nil
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.Flags().Bool("version", false, "print dlock's version and exit")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(a.demoCommand(), a.runCommand(), a.inspectCommand(), a.unlockCommand(),
		a.benchCommand(), a.dashboardCommand(), a.doctorCommand(), a.versionCommand())
	return root
}

// redisFlagSet reports whether the user chose a Redis (flag or environment).
func (a *app) redisFlagSet(cmd *cobra.Command) bool {
	if f := cmd.Flags().Lookup("redis"); f != nil && f.Changed {
		return true
	}
	v, ok := a.lookupEnv(envRedisURL)
	return ok && v != ""
}

// target parses --redis.
func (a *app) target() (*target, error) { return parseTarget(a.redisURL) }

// connect parses --redis, checks that Redis answers PING (within
// pingTimeout, without retries) and returns a client for it.
func (a *app) connect(ctx context.Context) (redis.UniversalClient, *target, error) {
	t, err := a.target()
	if err != nil {
		return nil, nil, err
	}
	if err := t.probe(ctx); err != nil {
		return nil, nil, t.failure(err, "cannot reach Redis at %s: %v", t.where(), err)
	}
	return t.client(false), t, nil
}

// clientOptions are the dlock options every command uses.
func (a *app) clientOptions() []dlock.Option {
	var opts []dlock.Option
	if a.namespace != "" {
		opts = append(opts, dlock.WithNamespace(a.namespace))
	}
	if a.verbose {
		h := slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelDebug})
		opts = append(opts, dlock.WithLogger(slog.New(h)))
	}
	return opts
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
