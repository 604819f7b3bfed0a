// Package doctor tells whether a Redis deployment can hold dlock's locks
// safely, for the user and namespace a service will use. Check runs a few
// probes against the server and returns a Report: one Check per concern,
// each ok, warn or fail, with a one-line detail. The dlock command runs it
// as "dlock doctor".
//
// # Checks
//
// In the order Check reports them (the Name constants):
//
//   - version: the server version against MinVersion (fail below it).
//   - mode: standalone, Sentinel-managed (detected from the sentinels'
//     subscriptions to __sentinel__:hello, or from a go-redis failover
//     client) or Cluster, the node's role, and whether sharded pub/sub
//     (SSUBSCRIBE, Redis 7.0+) is available. A Cluster node reached through
//     a single-node client fails: most keys would answer MOVED.
//   - scripting: EVAL and EVALSHA of a script that touches no key ("return
//     1"); fail when the user may not run scripts (NOPERM) or the server
//     has them disabled. dlock runs every lock operation as a script.
//   - pubsub: SUBSCRIBE, PUBLISH, delivery and UNSUBSCRIBE on a channel of
//     the layout dlock uses; fail when denied. Without pub/sub a waiter
//     learns of a release only by re-checking, up to a lock's TTL later.
//   - keys: SET with a 10s TTL and DEL of a key under the namespace; fail
//     when denied or refused (OOM, READONLY).
//   - eviction: maxmemory > 0 with any maxmemory-policy but noeviction
//     fails. Lock keys carry TTLs, so the volatile-* policies evict them as
//     readily as the allkeys-* ones; an evicted lock is granted again while
//     its holder still runs: two holders.
//   - persistence: neither RDB save points nor AOF is a warn (see below).
//   - replicas: connected replicas, and with Options.ReplicaAck whether a
//     grant would reach that many within Options.ReplicaTimeout, tested as
//     dlock.WithReplicaAck does it: the write and WAIT on one connection.
//   - listing (under a namespace only): warn while this user may run PUBSUB
//     CHANNELS, PUBSUB SHARDCHANNELS or SCAN. Redis applies ACL patterns
//     to the channels and keys a command touches, not to the names it
//     lists, so these show every tenant's lock names and client ids (host
//     and pid). Asked with redis.acl_check_cmd, never run; unknown (before
//     7.0, or without scripting) is a warn too.
//   - cluster (Cluster only): every master answers.
//
// What the user may not read is a warn, never a fail: managed services
// refuse CONFIG (and some INFO), and a least-privilege ACL
// (+@all -@dangerous) refuses both. On Redis 7.0+ Check first asks the
// server, from a script, whether this user may run INFO and CONFIG GET
// (redis.acl_check_cmd, which is not logged) and does not send a command it
// would be refused, so a restricted user's ACL LOG stays empty; on 6.2 it
// tries INFO once and, if INFO is denied, does not try CONFIG.
//
// # Minimum version: Redis 6.2
//
// dlock's scripts (internal/kind/*.lua) use two command options added in Redis
// 6.2.0: SET ... GET, with which a new fencing sequence is started above
// any value left in the counter (lib.lua), and ZADD ... GT, with which the
// watchdog and the read-write lock extend a member's deadline without ever
// shortening it (renew.lua, rwlib.lua). Listing locks (dlock.Locks, dlock
// inspect) samples hashes with HRANDFIELD, also 6.2.0. The rest is older:
// LPOS (6.0.6) for the fair queue, WAIT (3.0) for WithReplicaAck, and TIME
// before writes inside a script, which needs effects replication, the
// default since 5.0. Below 6.2 a script fails with an error as soon as it
// reaches one of those commands, which a first grant of a name does. Sharded
// pub/sub (SSUBSCRIBE, 7.0) is used where available and is not required.
// Valkey 7.2 and later report versions at or above 6.2 and are accepted.
//
// # What is guaranteed, and what is not
//
// Guaranteed:
//   - Check returns as soon as ctx is done, whatever the server does
//     (refuses, never answers), with an error wrapping ctx's cause. A probe
//     still waiting for its reply then ends in the background, within the
//     client's own read timeout or when the client is closed; the
//     subscription probe closes its connection at once.
//   - When Redis cannot be reached (the first PING fails on the network,
//     or gets no answer before ctx is done) the error wraps ErrUnreachable.
//   - Invalid Options return an error wrapping ErrInvalidArgument before
//     any network call.
//   - Check leaves nothing behind: its one probe key per master has a 10s
//     TTL from the moment it is written and is deleted right after; its
//     subscription is closed; it never writes a key without a TTL and
//     never changes the server's configuration.
//
// Not guaranteed:
//   - A Report is a snapshot: a configuration changed later (CONFIG SET,
//     a managed service's parameter group, a failover to a node set up
//     differently) is not seen. Run it again after such changes.
//   - ok for "keys" and "pubsub" proves access to the probe key and
//     channel under the namespace, not to every name: without a namespace
//     a lock's key is the lock name itself, which the ACL must allow too.
//   - Whether persistence is enough: with AOF or RDB on, a crash still
//     loses the writes since the last fsync or snapshot, and so the locks
//     granted in that window.
//   - On a Cluster, per-node checks run on the masters go-redis knows;
//     replicas are counted from each master's INFO.
//
// # Persistence and fencing tokens
//
// A restart of a server without persistence empties every lock: the next
// caller is granted a lock whose holder still runs, and that holder learns
// of the loss at its next renewal (every third of the watchdog timeout),
// with dlock.ErrDataLost. Fencing tokens still order the two
// holders: a token is the fencing counter's INCR while the counter lives,
// and a new counter is seeded from the server clock (TIME, in
// microseconds) above any value left in it, so the first token after the
// restart is larger than every token issued before it, as long as the
// server's clock has not gone back across the restart (a promoted replica
// whose clock runs behind the old master's breaks this). A resource that
// rejects writes carrying a smaller token than it has seen rejects the
// old holder.
package doctor
