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
package main

import (
	"os"
)

func main() {
	os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.LookupEnv))
}
