// Package dlockgocron runs go-co-op/gocron v2 jobs once across instances
// with dlock: a Locker (gocron.Locker) that takes one dlock Mutex per job
// run, and an Elector (gocron.Elector) that lets only the leader of a dlock
// Election run jobs. It is its own module so that gocron stays out of the
// dlock library's dependencies.
//
// # Using it
//
// Every instance creates its own dlock Client on the shared Redis and hands
// gocron a Locker (or an Elector) built on it:
//
//	c, _ := dlock.New(rdb)
//	l, _ := dlockgocron.NewLocker(c, dlockgocron.HoldAtLeast(10*time.Second))
//	s, _ := gocron.NewScheduler(gocron.WithDistributedLocker(l))
//	...
//	_ = s.Shutdown()
//	_ = l.Close()
//	_ = c.Close()
//
// With the Elector instead, pass gocron.WithDistributedElector(e) where
// e, _ := dlockgocron.NewElector(c, "my-service"), and Close it after the
// scheduler's Shutdown, before the Client's Close.
//
// # What is guaranteed
//
//   - Locker: while Redis keeps its data, two instances never hold the lock
//     of one job at the same time, so a fire runs on at most one instance;
//     Lock never waits, so the instances that lose skip the fire at once.
//   - The lock is watchdog-renewed for as long as the job runs, however
//     long; renewal never stops silently: a lost hold is reported to OnLost
//     and cancels the job's Locker.HoldContext (cause wrapping
//     dlock.ErrLockLost), no later than the lock could have expired in
//     Redis, and Unlock returns the loss.
//   - HoldAtLeast keeps the lock at least the given time after it was taken,
//     so instances whose clocks fire the same run a little later skip it;
//     the extra time is spent in the background and never blocks gocron.
//   - Elector: IsLeader returns nil on at most one instance at a time while
//     Redis keeps its data; a leader that crashes or is cut off is replaced
//     within the Client's watchdog timeout, one that closes its Elector or
//     Client at once (the leadership is handed over). The Elector campaigns
//     again after losing the leadership. LeaderContext is done no later
//     than the leadership could have ended in Redis.
//   - Close (Locker and Elector) stops every goroutine the type started,
//     but for a running job's watch of its hold, which ends with the hold
//     (at the job's Unlock, or the Client's Close).
//
// # What is not guaranteed
//
//   - That a fire runs at all: when the instance that won the lock is slow
//     to start, or all instances' fires fall inside another fire's
//     HoldAtLeast window, the fire is skipped everywhere. gocron has no
//     notion of a fire shared by instances; the lock name is the job's name,
//     not the name plus the scheduled time.
//   - Exactly-once across clock skew larger than HoldAtLeast: an instance
//     whose clock fires after the lock was released runs the job again.
//     Align the schedules (gocron.WithStartAt on a rounded time, or cron
//     jobs) and set HoldAtLeast above the expected skew.
//   - That a job stops when its lock or leadership is lost: gocron does not
//     cancel a running job, and with an Elector a new leader may start the
//     same job while the old one's run goes on. A job that must not overlap
//     another instance's run watches Locker.HoldContext (with a Locker) or
//     Elector.LeaderContext (with an Elector: gocron then consults no
//     Locker), and passes dlock fencing tokens to the resources it writes
//     when even that is not enough.
//   - Anything when Redis loses data (a failover to a replica that missed
//     the grant, a restart without persistence): see the dlock package doc.
package dlockgocron
