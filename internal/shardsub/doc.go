// Package shardsub is a sharded pub/sub subscriber for Redis Cluster 7 that
// survives the cluster changing under it: the transport half of sharded
// pub/sub for the notify hub (issue 19, part 2).
//
// A shard channel lives in a slot, the CRC16 slot of its hash tag, as a key
// does. Subscribe sends SSUBSCRIBE to the master that serves the slot, over
// one connection per master in use (not per channel), in commands of one
// slot each, since Redis refuses an SSUBSCRIBE whose channels are in several
// slots (CROSSSLOT). Messages and subscription events reach one Handler.
//
// The subscription of a channel is lost when its slot migrates (the old
// master pushes an sunsubscribe for it), when its master fails over (the
// demoted master pushes an sunsubscribe for each of its shard channels, on
// Redis 7.0.15 as measured here), when the connection drops, and when a
// subscription races a change and is answered MOVED, CLUSTERDOWN or
// TRYAGAIN. In each case the channel is placed again: the slot map is read
// again (CLUSTER SHARDS, through the ClusterClient), a MOVED's address is
// used at once, and SSUBSCRIBE is sent where the slot lives now, with a
// backoff while the cluster is not stable. Once confirmed there, the
// Handler receives Resubscribed for the channel: anything published in
// between was lost, so the caller re-checks Redis. A periodic read of the
// slot map (Config.RefreshInterval) moves any channel whose slot changed
// owner without the server saying so (older servers do not push an
// sunsubscribe on every change: redis/redis#12558 for a replica moved to
// another shard). A connection silent for Config.PingInterval is sent a
// PING; one that does not answer within Config.PingTimeout is dropped and
// its channels placed again.
//
// One manager goroutine writes to Redis (slot map reads, SSUBSCRIBE,
// SUNSUBSCRIBE, PING); one reader goroutine per master connection matches
// replies to the commands sent, in order, and dispatches messages. There is
// no goroutine per channel, and Subscribe and Unsubscribe never block on
// Redis. Close stops all of them and closes every connection.
//
// # go-redis' own sharded subscriptions
//
// go-redis v9.22.0's ClusterClient.SSubscribe and PubSub.SSubscribe are not
// used, because they do not survive the cluster changing (checked on a
// Cluster 7.0.15 by this package's tests, which assert each point, and by
// reading pubsub.go and osscluster.go):
//
//   - A ClusterClient PubSub is one connection to one node, chosen by the
//     slot of the first channel. SSubscribe of channels in several slots is
//     one command, refused with CROSSSLOT; a later SSubscribe of a channel
//     served by another master is answered MOVED, which the PubSub returns
//     from Receive and does not follow (go-redis issues #3133 and #3099,
//     open; pull request #3717, open, proposes a per-shard ShardedPubSub).
//   - After a slot migration or a failover, the server's sunsubscribe push
//     is returned to the caller as a *redis.Subscription of kind
//     "sunsubscribe", and nothing is subscribed again: the channel stays
//     silent.
//   - After a connection drop, the PubSub reconnects (to the slot owner of
//     one of its channels since the fix of issue #3806) and resubscribes
//     every shard channel in one SSUBSCRIBE, refused with CROSSSLOT as soon
//     as they span two slots: every channel is lost. The same single
//     command was node-redis#2902's bug; node-redis#3098, ioredis#1987,
//     StackExchange.Redis#2969 and rueidis#55 fixed the same gaps in other
//     clients.
//
// This package therefore uses go-redis only as a connection: a
// *redis.Client of its own per master address, built from the options of
// the ClusterClient's node clients (so it dials, authenticates and times
// out as they do, through ClusterOptions.NewClient), and a PubSub on it
// whose SSubscribe, SUnsubscribe and Ping it calls with channels of one
// slot each. A node whose connection fails is never reused (the PubSub
// would resubscribe everything in one command): it is closed, and its
// channels are placed again on fresh nodes. A few error replies make
// go-redis replace the connection under its PubSub (READONLY, a MOVED to
// the connection's own address); they are treated as a connection loss
// too.
//
// # Cluster bus cost
//
// Measured by this package's tests on 3 masters with one replica each
// (CLUSTER INFO's cluster_stats_messages_*, summed over the 6 nodes): a
// classic PUBLISH costs 5 bus messages (one to every other node, N-1); an
// SPUBLISH run on the slot's master costs 1 (its replica), whether anyone
// subscribes or not, and no classic publish message.
package shardsub
