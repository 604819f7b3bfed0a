package main

import (
	"net"
	"net/url"
	"strconv"
	"strings"
)

// hostList is the dashboard's allowed hosts: the names a browser may reach
// it by. Every request's Host must be on it (a DNS-rebound name is not, so
// a page of the attacker's cannot read the dashboard's CSRF token), and so
// must the Origin of a force unlock. It is immutable once built: safe for
// concurrent use.
type hostList struct {
	loopback bool        // loopback names (localhost, 127.0.0.0/8, ::1) on any port
	entries  []hostEntry // --allow-host
}

// hostEntry is one --allow-host: a host name or IP, and a port or "" for
// any port.
type hostEntry struct{ host, port string }

// parseAllowHost reads one --allow-host value: HOST or HOST:PORT as a
// browser's address bar has it (an IPv6 address in brackets with a port).
func parseAllowHost(s string) (hostEntry, bool) {
	if s == "" || strings.ContainsAny(s, "/?#@ ") {
		return hostEntry{}, false
	}
	host, port := splitHost(s)
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return hostEntry{}, false
		}
	}
	if host == "" || (strings.Contains(host, ":") && net.ParseIP(host) == nil) {
		return hostEntry{}, false
	}
	return hostEntry{host: host, port: port}, true
}

// splitHost splits a Host header (or an --allow-host) into its normalized
// host (lower case, no trailing dot, no IPv6 brackets) and its port ("" for
// none).
func splitHost(hostport string) (host, port string) {
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		h, p = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), ""
	}
	return strings.ToLower(strings.TrimSuffix(h, ".")), p
}

// allows reports whether a request's Host (host[:port]) is on the list.
func (l hostList) allows(hostport string) bool {
	host, port := splitHost(hostport)
	if host == "" {
		return false
	}
	if l.loopback {
		if host == "localhost" {
			return true
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			return true
		}
	}
	for _, e := range l.entries {
		if e.host == host && (e.port == "" || e.port == port) {
			return true
		}
	}
	return false
}

// allowsOrigin reports whether an Origin header names a page served from a
// host on the list: http or https, and an allowed host[:port].
func (l hostList) allowsOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil || (u.Path != "" && u.Path != "/") {
		return false
	}
	return l.allows(u.Host)
}

// pageURL is the address the dashboard prints: a loopback listener's own,
// else the first allowed host's, on the listener's port unless the entry
// names one.
func (l hostList) pageURL(addr net.Addr) string {
	if l.loopback || len(l.entries) == 0 {
		return "http://" + addr.String() + "/"
	}
	e := l.entries[0]
	port := e.port
	if port == "" {
		_, port, _ = net.SplitHostPort(addr.String())
	}
	return "http://" + net.JoinHostPort(e.host, port) + "/"
}
