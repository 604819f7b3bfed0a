package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// redisURLHelp is the --redis part of the root command's help.
const redisURLHelp = `--redis takes go-redis URLs, in three forms:

  redis://[user:password@]host:port[/db]      one Redis server (a Cluster
                                              node is detected and used as
                                              the cluster's seed)
  redis://[user:pw@]host:port?addr=host2:port&addr=host3:port
                                              Redis Cluster with several seed
                                              nodes (go-redis ParseClusterURL)
  redis://[user:pw@]sentinel:26379?master_name=NAME[&addr=sentinel2:26379]
                                              the master NAME monitored by
                                              Sentinel (go-redis
                                              ParseFailoverURL); user:pw
                                              are the sentinels', the
                                              master's go in &username= and
                                              &password=

rediss:// instead of redis:// uses TLS. A bare host:port means
redis://host:port, and a path (/run/redis.sock) a Unix socket. Other query
parameters are go-redis options (dial_timeout=3s, ...).`

// target is the Redis deployment that --redis names: exactly one of node,
// failover and cluster is set.
type target struct {
	node     *redis.Options
	failover *redis.FailoverOptions
	cluster  *redis.ClusterOptions
}

// kind names the deployment for messages.
func (t *target) kind() string {
	switch {
	case t.failover != nil:
		return "Sentinel"
	case t.cluster != nil:
		return "Cluster"
	}
	return "single node"
}

// where is the address part of messages (never a password).
func (t *target) where() string {
	switch {
	case t.failover != nil:
		return fmt.Sprintf("master %q via Sentinel %s", t.failover.MasterName, strings.Join(t.failover.SentinelAddrs, ","))
	case t.cluster != nil:
		return "Cluster " + strings.Join(t.cluster.Addrs, ",")
	}
	return t.node.Addr
}

// normalizeURL turns the short forms into URLs: host:port is redis://host:port
// and an absolute path a Unix socket.
func normalizeURL(raw string) string {
	raw = strings.TrimSpace(raw)
	switch {
	case strings.Contains(raw, "://"):
		return raw
	case strings.HasPrefix(raw, "/"):
		return "unix://" + raw
	case raw == "":
		return raw
	}
	return "redis://" + raw
}

// parseTarget parses a --redis value (see redisURLHelp).
func parseTarget(raw string) (*target, error) {
	u := normalizeURL(raw)
	bad := func(err error) error {
		return usagef("bad Redis URL %s: %s (want redis://host:port[/db], see dlock --help)", redactURL(u), strings.TrimPrefix(err.Error(), "redis: "))
	}
	if raw == "" {
		return nil, usagef("--redis is empty (want redis://host:port[/db], see dlock --help)")
	}
	parsed, err := url.Parse(u)
	if err != nil {
		return nil, usagef("bad Redis URL %s: not a URL (want redis://host:port[/db], see dlock --help)", redactURL(u))
	}
	if strayAt(parsed) {
		// go-redis's error would quote the password's rest ("invalid
		// database number"), and a fragment would be dropped silently.
		return nil, usagef("bad Redis URL (hidden): %s; percent-encode them (%%2F, %%3F, %%23, %%40)", strayAtWhy)
	}
	q := parsed.Query()
	t := &target{}
	switch {
	case q.Has("master_name"):
		if q.Get("master_name") == "" {
			return nil, usagef("bad Redis URL %s: master_name is empty", redactURL(u))
		}
		o, err := redis.ParseFailoverURL(u)
		if err != nil {
			return nil, bad(err)
		}
		o.DisableIdentity = true
		t.failover = o
	case q.Has("addr"):
		o, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, bad(err)
		}
		o.DisableIdentity = true
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		t.cluster = o
	default:
		o, err := redis.ParseURL(u)
		if err != nil {
			return nil, bad(err)
		}
		o.DisableIdentity = true
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		t.node = o
	}
	return t, nil
}

// client makes a go-redis client for the target. A probe client does not
// retry and keeps one connection.
func (t *target) client(probe bool) redis.UniversalClient {
	switch {
	case t.failover != nil:
		o := *t.failover
		if probe {
			o.MaxRetries, o.DialerRetries, o.PoolSize = -1, 1, 1
		}
		return redis.NewFailoverClient(&o)
	case t.cluster != nil:
		o := *t.cluster
		if probe {
			o.MaxRetries, o.DialerRetries, o.PoolSize = -1, 1, 1
		}
		return redis.NewClusterClient(&o)
	}
	o := *t.node
	if probe {
		o.MaxRetries, o.DialerRetries, o.PoolSize = -1, 1, 1
	}
	return redis.NewClient(&o)
}

// single returns the options of a single-node target, or a usage error for
// commands (bench, demo) that need one server.
func (t *target) single(command string) (*redis.Options, error) {
	if t.node == nil {
		return nil, usagef("%s runs against one Redis server, and --redis names a %s (%s); give it redis://host:port of one server", command, t.kind(), t.where())
	}
	return t.node, nil
}

// probe PINGs the target once, without retries and within pingTimeout, and
// turns a single node that is a Redis Cluster node into a cluster target
// seeded by it (a plain client would only get MOVED replies).
func (t *target) probe(ctx context.Context) error {
	c := t.client(true)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	err := c.Ping(ctx).Err()
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer to PING within %v", pingTimeout)
	}
	if err != nil && t.node != nil && t.node.DB != 0 && strings.Contains(err.Error(), "cluster mode") {
		return fmt.Errorf("%s is a Redis Cluster node, and a cluster has only database 0, not /%d", t.node.Addr, t.node.DB)
	}
	if err != nil || t.node == nil {
		return err
	}
	if !clusterNode(ctx, c) {
		return nil
	}
	n := t.node
	if n.DB != 0 {
		return fmt.Errorf("%s is a Redis Cluster node, and a cluster has only database 0, not /%d", n.Addr, n.DB)
	}
	t.cluster = &redis.ClusterOptions{
		Addrs: []string{n.Addr}, Username: n.Username, Password: n.Password, TLSConfig: n.TLSConfig,
		DialTimeout: n.DialTimeout, ReadTimeout: n.ReadTimeout, WriteTimeout: n.WriteTimeout,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	t.node = nil
	return nil
}

// clusterNode reports whether c's server runs in cluster mode: HELLO's mode
// (6.2+, allowed to any user, so a least-privilege user's ACL LOG stays
// empty), else INFO cluster. INFO may be renamed or refused: then it is a
// plain node.
func clusterNode(ctx context.Context, c redis.UniversalClient) bool {
	if v, err := c.Do(ctx, "hello").Result(); err == nil {
		switch m := v.(type) {
		case map[any]any:
			return m["mode"] == "cluster"
		case []any:
			for i := 0; i+1 < len(m); i += 2 {
				if m[i] == "mode" {
					return m[i+1] == "cluster"
				}
			}
		}
	}
	info, err := c.Info(ctx, "cluster").Result()
	return err == nil && strings.Contains(info, "cluster_enabled:1")
}

// notServing are the error replies of a Redis that is there but cannot serve
// for now: they exit 69 like no answer at all, since retrying later helps.
var notServing = []string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN"}

// failure is the exit error for err, a failed use of Redis at t. An error
// reply is Redis's own answer, quoted, never "cannot reach": a refusal (a
// wrong password, an ACL denial, any other reply) exits 77, a server that
// says it cannot serve now 69. Anything else got no answer from Redis and is
// described by format and args (exit 69).
func (t *target) failure(err error, format string, args ...any) error {
	var reply redis.Error
	if !errors.As(err, &reply) || errors.Is(err, redis.Nil) {
		return exitf(exitUnavailable, format, args...)
	}
	for _, p := range notServing {
		if redis.HasErrorPrefix(reply, p) {
			return exitf(exitUnavailable, "Redis at %s cannot serve now: %v", t.where(), reply)
		}
	}
	hint := ""
	if redis.HasErrorPrefix(reply, "WRONGPASS") || redis.HasErrorPrefix(reply, "NOAUTH") {
		hint = " (check the user and password in --redis)"
	}
	return exitf(exitRefused, "Redis at %s refused dlock: %v%s", t.where(), reply, hint)
}
