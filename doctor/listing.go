package doctor

import (
	"fmt"
	"strings"
)

// listingCommands list every channel or key name of the server, whatever
// the caller's ACL channel and key patterns (Redis checks patterns on what
// a command touches, not on the names it returns). In permScript's order.
var listingCommands = [...]string{"PUBSUB CHANNELS", "PUBSUB SHARDCHANNELS", "SCAN"}

// checkListing adds the listing check, under a namespace only: whether this
// user may list the other tenants' lock names (their release channels and
// keys) and client ids (host and pid, in their client channels). It asks
// the server (redis.acl_check_cmd, which logs nothing) and never sends the
// commands themselves.
func (d *doctor) checkListing() {
	if d.opts.Namespace == "" {
		return
	}
	d.perNode(NameListing, func(n *node) (Status, string) {
		var allowed, unknown []string
		for i, c := range listingCommands {
			switch n.aclListing[i] {
			case 1:
				allowed = append(allowed, c)
			case -1:
				if c != "PUBSUB SHARDCHANNELS" { // before 7.0 there is none to ask about
					unknown = append(unknown, c)
				}
			}
		}
		switch {
		case len(allowed) > 0:
			return Warn, fmt.Sprintf("this user may run %s, which list every channel or key of the server whatever its ACL patterns: it sees other tenants' lock names and client ids (host, pid); where they are confidential deny %s (without SCAN, Locks and dlock inspect --all do not work)",
				strings.Join(allowed, ", "), denyRules(allowed))
		case len(unknown) > 0:
			return Warn, fmt.Sprintf("unknown whether this user may run %s (the server cannot be asked: Redis 7.0+ and scripting are needed), which list every channel or key whatever the ACL's patterns: other tenants' lock names and client ids would be visible", strings.Join(unknown, ", "))
		}
		return OK, "PUBSUB CHANNELS, PUBSUB SHARDCHANNELS and SCAN denied: this user cannot list other tenants' lock names or client ids"
	})
}

// denyRules are the ACL rules that deny the listing commands.
func denyRules(cmds []string) string {
	var out []string
	for _, c := range cmds {
		out = append(out, "-"+strings.ToLower(strings.ReplaceAll(c, " ", "|")))
	}
	return strings.Join(out, " ")
}
