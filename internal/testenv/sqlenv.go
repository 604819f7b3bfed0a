package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// sbinDirs are searched for daemons when they are not in PATH (non-root
// users often lack /usr/sbin in PATH).
var sbinDirs = []string{"/usr/sbin", "/usr/local/sbin", "/sbin"}

// lookDaemon resolves the first of names found in PATH or in sbinDirs.
func lookDaemon(hint string, names ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
		if strings.ContainsRune(n, '/') {
			continue
		}
		for _, d := range sbinDirs {
			p := filepath.Join(d, n)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("testenv: %s not found in PATH or %v; %s", strings.Join(names, "/"), sbinDirs, hint)
}

// BaseDirEnv names the environment variable that, when set, is the
// directory where SQL servers get their private directories.
const BaseDirEnv = "DLOCK_TESTENV_DIR"

// sqlBaseDir is where SQL servers get their private directories:
// $DLOCK_TESTENV_DIR, else /dev/shm when it is a writable directory (a
// tmpfs: copying a data directory there takes tens of milliseconds, on a
// busy disk up to a second), else the temp dir. It must be traversable by
// the user PostgreSQL runs as.
func sqlBaseDir() string {
	if d := os.Getenv(BaseDirEnv); d != "" {
		return d
	}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() && syscall.Access("/dev/shm", 2 /* W_OK */) == nil {
		return "/dev/shm"
	}
	return os.TempDir()
}

// ownerFile holds the pid of the process that made a server directory.
const ownerFile = "owner.pid"

// serverDir makes a private directory for a server of kind, first removing
// directories of that kind left behind by processes that died without
// cleanup (on a tmpfs they would hold memory until reboot).
func serverDir(kind string) (string, error) {
	base := sqlBaseDir()
	prefix := "dlock-" + kind + "-"
	if ents, err := os.ReadDir(base); err == nil {
		for _, e := range ents {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
				continue
			}
			d := filepath.Join(base, e.Name())
			b, err := os.ReadFile(filepath.Join(d, ownerFile))
			if err != nil {
				continue // being created, or not ours
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || pid <= 0 || pid == os.Getpid() {
				continue
			}
			if syscall.Kill(pid, 0) == syscall.ESRCH {
				removeServerDir(d, 0)
			}
		}
	}
	dir, err := os.MkdirTemp(base, prefix)
	if err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("testenv: %w", err)
	}
	return dir, nil
}

// removeServerDir removes the directory of a server that no longer runs,
// and the System V segment a PostgreSQL there left behind, waiting up to
// wait for its last backends to exit.
func removeServerDir(dir string, wait time.Duration) {
	data := filepath.Join(dir, "data")
	if st, err := os.Stat(data); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			removeShm(data, int(sys.Uid), wait)
		}
	}
	_ = os.RemoveAll(dir)
}

// templateMu serializes template builds within the process (parallel tests
// all wanting the first template); other processes are handled by the atomic
// rename in cachedTemplate.
var templateMu sync.Mutex

// cachedTemplate returns a directory holding what build made, building it
// once per machine, user and key. The cache lives in
// $TMPDIR/dlock-testenv-cache-<uid>/<kind>-<hash of key>: it is never
// modified after the atomic rename that publishes it, so concurrent test
// processes share it safely, and a new server binary or new init arguments
// (part of key) get a new entry. Copying a template (tens of ms) is what
// makes a fresh server start fast; building one (initdb, mariadb-install-db)
// takes about a second. owner, if not nil, is the user the build runs as:
// the build directory is chowned to it first.
func cachedTemplate(kind string, key []string, owner *syscall.Credential, build func(dir string) error) (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	h := sha256.Sum256([]byte(strings.Join(key, "\x00")))
	root := filepath.Join(os.TempDir(), fmt.Sprintf("dlock-testenv-cache-%d", os.Geteuid()))
	final := filepath.Join(root, kind+"-"+hex.EncodeToString(h[:8]))
	if st, err := os.Stat(final); err == nil && st.IsDir() {
		return final, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("testenv: template cache: %w", err)
	}
	tmp, err := os.MkdirTemp(root, "build-"+kind+"-")
	if err != nil {
		return "", fmt.Errorf("testenv: template cache: %w", err)
	}
	// The cache root may be 0755 while MkdirTemp gives 0700: let the owner
	// (and, through copies, the servers) read it.
	if err := os.Chmod(tmp, 0o755); err != nil {
		_ = os.RemoveAll(tmp)
		return "", fmt.Errorf("testenv: template cache: %w", err)
	}
	if owner != nil {
		if err := os.Chown(tmp, int(owner.Uid), int(owner.Gid)); err != nil {
			_ = os.RemoveAll(tmp)
			return "", fmt.Errorf("testenv: template cache: %w", err)
		}
	}
	if err := build(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.RemoveAll(tmp)
		// Another process published the same template first.
		if st, serr := os.Stat(final); serr == nil && st.IsDir() {
			return final, nil
		}
		return "", fmt.Errorf("testenv: template cache: %w", err)
	}
	return final, nil
}

// binaryKey identifies a binary's build for cache keys: path, size and
// modification time (a package upgrade changes them).
func binaryKey(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return path
	}
	return fmt.Sprintf("%s:%d:%d", path, st.Size(), st.ModTime().UnixNano())
}

// copyTree copies the directory src to dst (which must not exist), keeping
// permission bits, and chowns everything to owner when owner is not nil.
// Regular files, directories and symlinks only.
func copyTree(src, dst string, owner *syscall.Credential) error {
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, info.Mode().Perm()); err != nil {
				return err
			}
			// Mkdir applies the umask; the servers insist on exact modes
			// (PostgreSQL: 0700 or 0750).
			if err := os.Chmod(target, info.Mode().Perm()); err != nil {
				return err
			}
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case d.Type().IsRegular():
			if err := copyFile(path, target, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return nil // sockets, pipes: never part of a template
		}
		if owner != nil {
			return os.Lchown(target, int(owner.Uid), int(owner.Gid))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("testenv: copy %s: %w", src, err)
	}
	return nil
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, perm)
}

// runTool runs an init tool (initdb, mariadb-install-db) in dir, as cred
// when not nil, with its output in the error when it fails.
func runTool(dir string, cred *syscall.Credential, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr()
	cmd.SysProcAttr.Credential = cred
	out, err := cmd.CombinedOutput()
	if err != nil {
		if len(out) > 4096 {
			out = out[len(out)-4096:]
		}
		return fmt.Errorf("testenv: %s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// startSQLServers starts a mariadbd and a PostgreSQL server, those asked
// for, at once. It returns what started even when the other failed.
func startSQLServers(mariadb, postgres bool) (my *MariaDB, pg *Postgres, err error) {
	var (
		wg         sync.WaitGroup
		merr, perr error
	)
	if mariadb {
		wg.Add(1)
		go func() {
			defer wg.Done()
			my, merr = StartMariaDBServer(MariaDBConfig{})
		}()
	}
	if postgres {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pg, perr = StartPostgresServer(PostgresConfig{})
		}()
	}
	wg.Wait()
	return my, pg, errors.Join(merr, perr)
}

// MainSQL is a package's TestMain body for tests that share one mariadbd
// and/or one PostgreSQL server: it starts the servers whose pointer is not
// nil (both at once), stores them there, runs the tests, runs check (if not
// nil) while the servers still run, stops them, and looks for leaked
// goroutines. It returns the exit code for os.Exit. pkg names the package
// in error messages. Tests that kill, pause or restart a server start their
// own (StartMariaDB, StartPostgres). Call it from TestMain only.
func MainSQL(m *testing.M, pkg string, mariadb **MariaDB, postgres **Postgres, check func() error) int {
	my, pg, err := startSQLServers(mariadb != nil, postgres != nil)
	stop := func() error {
		var errs []error
		if my != nil {
			errs = append(errs, my.Stop())
		}
		if pg != nil {
			errs = append(errs, pg.Stop())
		}
		return errors.Join(errs...)
	}
	if err != nil {
		_ = stop()
		fmt.Fprintf(os.Stderr, "%s tests need their SQL servers: %v\n", pkg, err)
		return 1
	}
	if mariadb != nil {
		*mariadb = my
	}
	if postgres != nil {
		*postgres = pg
	}
	code := m.Run()
	if code == 0 && check != nil {
		if err := check(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", pkg, err)
			code = 1
		}
	}
	if err := stop(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: stop SQL servers: %v\n", pkg, err)
	}
	if code == 0 {
		if err := FindLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: goleak: %v\n", pkg, err)
			code = 1
		}
	}
	return code
}
