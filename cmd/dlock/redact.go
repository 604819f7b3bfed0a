package main

import (
	"net/url"
	"strings"
)

// hidden replaces a secret in a shown URL.
const hidden = "xxxxx"

// secretWords mark a query parameter whose value is a secret: go-redis's
// password= and sentinel_password=, and the usual names of tokens and keys
// in an endpoint's URL (token=, api_key=, auth=, sig=...).
var secretWords = []string{"pass", "pwd", "secret", "token", "key", "auth", "credential", "sig"}

// redactURL is a URL as dlock shows it anywhere (help, errors, the
// dashboard's page and JSON): the user part's password and the values of
// secret query parameters (secretWords) replaced by xxxxx, the rest as
// written. A URL that does not parse is not shown at all. Every place that
// shows a URL goes through it.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.Opaque != "" {
		return u.Scheme + ":(hidden)"
	}
	if strayAt(u) {
		return u.Scheme + "://(hidden: " + strayAtWhy + ")"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), hidden)
	}
	if u.RawQuery != "" {
		params := strings.Split(u.RawQuery, "&")
		for i, p := range params {
			k, _, found := strings.Cut(p, "=")
			if found && secretParam(k) {
				params[i] = k + "=" + hidden
			}
		}
		u.RawQuery = strings.Join(params, "&")
	}
	return u.String()
}

// secretParam reports whether the query key (as written) names a secret.
func secretParam(key string) bool {
	k, err := url.QueryUnescape(key)
	if err != nil {
		return true // unreadable: hide its value
	}
	k = strings.ToLower(k)
	for _, w := range secretWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// strayAtWhy says what strayAt found, for messages.
const strayAtWhy = "an '@' outside the user part: a user or password with an unescaped '/', '?' or '#'"

// strayAt reports whether the parsed URL has an '@' outside its user part:
// in a redis:// path or fragment, in a query parameter's name, or in the
// value of one that does not name a secret (secretParam). That is a user
// and password whose '/', '?' or '#' was not percent-encoded, which moved
// the rest of the password out of the user part, where nothing hides it;
// or credentials given where none belong (a Cluster seed's &addr=u:pw@h).
func strayAt(u *url.URL) bool {
	if u.Scheme != "unix" && strings.Contains(u.EscapedPath(), "@") {
		return true // a Unix socket's path may hold '@'; a db number not
	}
	if strings.Contains(u.EscapedFragment(), "@") {
		return true
	}
	for _, p := range strings.Split(u.RawQuery, "&") {
		k, v, _ := strings.Cut(p, "=")
		if strings.Contains(k, "@") || (strings.Contains(v, "@") && !secretParam(k)) {
			return true
		}
	}
	return false
}
