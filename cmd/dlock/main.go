// Command dlock operates dlock's distributed locks on Redis from the shell:
// hold a lock while a command runs, look at and break locks, check that a
// Redis can hold locks safely, run the coupon demo and the contention
// benchmark, and serve a live web view of the locks.
//
//	dlock demo                          # the coupon race, on an embedded Redis
//	dlock run nightly-report -- ./report.sh
//	dlock inspect coupon:issue:42
//	dlock inspect --all                 # every lock, election, semaphore, latch in use
//	dlock doctor                        # can this Redis hold locks safely?
//	dlock unlock --force coupon:issue:42
//	dlock bench -w 16 -k 100
//	dlock dashboard --listen 127.0.0.1:8080
//
// Run "dlock help" or "dlock COMMAND --help" for the details and exit codes.
//
// The dashboard (dlock dashboard) has no authentication of its own. It
// answers only requests whose Host is an allowed host: loopback names on a
// loopback listener, plus each --allow-host; a listener beyond loopback
// does not start without --allow-host. A force unlock needs the page's
// CSRF token and, from a browser, an Origin on the same list. That keeps
// web pages (DNS-rebound names included) from reading it or unlocking
// through a visitor's browser. It does not stop anyone who can reach the
// port: they can send an allowed Host, read every lock name and holder
// (host, pid) and, with --allow-unlock, force-unlock any lock. Off
// loopback, put an authenticating reverse proxy in front, or keep it on
// loopback behind an SSH tunnel. Passwords and secret query parameters in
// URLs are shown as "xxxxx" wherever the CLI prints a URL.
package main

import (
	"os"
)

func main() {
	os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.LookupEnv))
}
