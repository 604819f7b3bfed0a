package doctor

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// node is what the probes found on one server (a master, on a Cluster).
type node struct {
	addr string
	err  error // the node could not be probed (network): nothing below is set

	hello    map[string]string // HELLO's reply: server, version, mode, role
	helloErr error

	evalErr, evalshaErr error

	// aclInfo and aclConfig: 1 when this user may run INFO / CONFIG GET,
	// 0 when it may not, -1 when the server could not tell (before 7.0, or
	// no scripting).
	aclInfo, aclConfig int
	// aclListing: the same for the commands that list other tenants' names
	// whatever the ACL's patterns, in listingCommands' order.
	aclListing [len(listingCommands)]int

	info     map[string]string // INFO's fields, nil unless read
	infoErr  error
	infoSkip string            // why INFO was not sent
	conf     map[string]string // CONFIG GET's values, those read
	confErr  error
	confSkip string // why CONFIG GET was not sent

	sentinels int64 // subscribers of __sentinel__:hello, -1 unknown
}

// permScript asks the server whether this user may run INFO and CONFIG
// GET without running them: redis.acl_check_cmd (Redis 7.0+) checks the
// ACL and, unlike a refused command, adds nothing to ACL LOG. -1: cannot
// tell.
const permScript = `local function allowed(...)
  if not redis.acl_check_cmd then return -1 end
  local ok, r = pcall(redis.acl_check_cmd, ...)
  if not ok then return -1 end
  if r then return 1 end
  return 0
end
return {allowed('info'), allowed('config', 'get', 'maxmemory'),
  allowed('pubsub', 'channels'), allowed('pubsub', 'shardchannels'), allowed('scan', '0')}`

// pingScript is the harmless script of the scripting check.
const pingScript = "return 1"

// pingScriptSHA is pingScript's SHA1.
const pingScriptSHA = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"

// configParams are read with one CONFIG GET each (one pattern per call
// before 7.0).
var configParams = []string{"maxmemory", "maxmemory-policy", "appendonly", "save"}

// cmdable is what the probes need of a client: redis.Client and
// redis.UniversalClient have it.
type cmdable interface {
	redis.Cmdable
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// probeNode fills n from c. It returns only errors that are not replies
// (network, ctx): the node then counts as unreachable.
func probeNode(ctx context.Context, c cmdable, n *node) error {
	n.aclInfo, n.aclConfig, n.sentinels = -1, -1, -1
	for i := range n.aclListing {
		n.aclListing[i] = -1
	}
	v, err := call(ctx, func(ctx context.Context) (any, error) { return c.Do(ctx, "hello").Result() })
	if err != nil && !isReply(err) {
		return err
	}
	n.hello, n.helloErr = parseHello(v), err

	_, n.evalErr = call(ctx, func(ctx context.Context) (any, error) { return c.Eval(ctx, pingScript, nil).Result() })
	if n.evalErr != nil && !isReply(n.evalErr) {
		return n.evalErr
	}
	_, n.evalshaErr = call(ctx, func(ctx context.Context) (any, error) { return c.EvalSha(ctx, pingScriptSHA, nil).Result() })
	if n.evalshaErr != nil && !isReply(n.evalshaErr) {
		return n.evalshaErr
	}
	if strings.HasPrefix(errText(n.evalshaErr), "NOSCRIPT") {
		n.evalshaErr = nil // allowed; the cache was flushed in between
	}
	if n.evalErr == nil {
		v, err := call(ctx, func(ctx context.Context) ([]int64, error) { return c.Eval(ctx, permScript, nil).Int64Slice() })
		if err != nil && !isReply(err) {
			return err
		}
		if err == nil && len(v) == 2+len(listingCommands) {
			n.aclInfo, n.aclConfig = int(v[0]), int(v[1])
			for i := range n.aclListing {
				n.aclListing[i] = int(v[2+i])
			}
		}
	}

	if err := probeInfo(ctx, c, n); err != nil {
		return err
	}
	return probeConfig(ctx, c, n)
}

// probeInfo reads INFO unless the ACL is known to deny it.
func probeInfo(ctx context.Context, c cmdable, n *node) error {
	if n.aclInfo == 0 {
		n.infoSkip = "the ACL denies it"
	} else {
		s, err := call(ctx, func(ctx context.Context) (string, error) { return c.Info(ctx).Result() })
		if err != nil && !isReply(err) {
			return err
		}
		n.infoErr = err
		if err == nil {
			n.info = parseInfo(s)
		}
	}

	return nil
}

// probeConfig reads with CONFIG GET what INFO does not tell, unless the
// ACL denies it (or is likely to).
func probeConfig(ctx context.Context, c cmdable, n *node) error {
	switch {
	case n.aclConfig == 0:
		n.confSkip = "the ACL denies it"
	case n.aclConfig < 0 && denied(n.infoErr):
		// Without acl_check_cmd, a user denied INFO (@dangerous) is denied
		// CONFIG (@admin @dangerous) too: do not add to its ACL LOG.
		n.confSkip = "INFO was denied, so CONFIG is too"
	default:
		n.conf = map[string]string{}
		for _, p := range configParams {
			if n.info != nil && p != "save" {
				continue // INFO has it
			}
			m, err := call(ctx, func(ctx context.Context) (map[string]string, error) { return c.ConfigGet(ctx, p).Result() })
			if err != nil && !isReply(err) {
				return err
			}
			if err != nil {
				n.confErr = err
				break
			}
			if v, ok := m[p]; ok {
				n.conf[p] = v
			}
		}
	}
	return nil
}

// probeNodes probes the master(s) into d.nodes.
func (d *doctor) probeNodes(ctx context.Context) error {
	if d.cluster == nil {
		n := &node{addr: clientAddr(d.rdb)}
		if err := probeNode(ctx, d.rdb, n); err != nil {
			return d.lost(ctx, err)
		}
		d.nodes = []*node{n}
		return nil
	}
	var (
		mu    sync.Mutex
		nodes []*node
	)
	_, err := call(ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, d.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			n := &node{addr: c.Options().Addr}
			n.err = probeNode(ctx, c, n)
			mu.Lock()
			nodes = append(nodes, n)
			mu.Unlock()
			return nil
		})
	})
	if err != nil {
		return d.lost(ctx, err)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].addr < nodes[j].addr })
	d.nodes = nodes
	return nil
}

// lost is the error for a probe that ended without a reply after the first
// PING had one: ctx's cause, or the network error, wrapping ErrUnreachable.
func (d *doctor) lost(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("doctor: the context ended before the checks did: %w", err)
	}
	return fmt.Errorf("%w: lost contact after the first PING: %w", ErrUnreachable, err)
}

// clientAddr names a single-node client for messages.
func clientAddr(rdb redis.UniversalClient) string {
	if c, ok := rdb.(*redis.Client); ok {
		return c.Options().Addr
	}
	return "redis"
}

// parseHello reads HELLO's reply, a map (RESP3) or a flat list (RESP2).
func parseHello(v any) map[string]string {
	out := map[string]string{}
	put := func(k, v any) {
		switch v := v.(type) {
		case string:
			out[fmt.Sprint(k)] = v
		case int64:
			out[fmt.Sprint(k)] = strconv.FormatInt(v, 10)
		}
	}
	switch m := v.(type) {
	case map[any]any:
		for k, v := range m {
			put(k, v)
		}
	case map[string]any:
		for k, v := range m {
			put(k, v)
		}
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			put(m[i], m[i+1])
		}
	}
	return out
}

// parseInfo reads INFO's "field:value" lines.
func parseInfo(s string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// server returns the server's name and version ("" when unknown).
func (n *node) server() (name, version string) {
	name, version = n.hello["server"], n.hello["version"]
	if version == "" && n.info != nil {
		version = n.info["redis_version"]
		if v := n.info["valkey_version"]; v != "" {
			name, version = "valkey", v
		}
	}
	if name == "" {
		name = "redis"
	}
	return name, version
}

// role returns "master", "replica" or "".
func (n *node) role() string {
	r := n.hello["role"]
	if r == "" && n.info != nil {
		r = n.info["role"]
	}
	if r == "slave" {
		r = "replica"
	}
	return r
}

// readable says why INFO and CONFIG could not be read, for details.
func (n *node) unreadable() string {
	var why []string
	switch {
	case n.infoSkip != "":
		why = append(why, "INFO not sent: "+n.infoSkip)
	case n.infoErr != nil:
		why = append(why, "INFO: "+short(n.infoErr))
	}
	switch {
	case n.confSkip != "":
		why = append(why, "CONFIG not sent: "+n.confSkip)
	case n.confErr != nil:
		why = append(why, "CONFIG GET: "+short(n.confErr))
	}
	return strings.Join(why, "; ")
}

// memory returns maxmemory (bytes) and the policy, ok false when unknown.
func (n *node) memory() (maxmemory int64, policy string, ok bool) {
	mm, pol := "", ""
	if n.info != nil {
		mm, pol = n.info["maxmemory"], n.info["maxmemory_policy"]
	}
	if mm == "" {
		mm = n.conf["maxmemory"]
	}
	if pol == "" {
		pol = n.conf["maxmemory-policy"]
	}
	v, err := strconv.ParseInt(mm, 10, 64)
	if err != nil || pol == "" {
		return 0, "", false
	}
	return v, pol, true
}

// aof returns whether AOF is on, ok false when unknown.
func (n *node) aof() (on, ok bool) {
	if n.info != nil {
		if v, found := n.info["aof_enabled"]; found {
			return v == "1", true
		}
	}
	if v, found := n.conf["appendonly"]; found {
		return v == "yes", true
	}
	return false, false
}

// save returns the RDB save points ("" none), ok false when unknown.
func (n *node) save() (string, bool) {
	v, ok := n.conf["save"]
	return v, ok
}
