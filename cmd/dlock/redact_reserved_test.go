package main

import (
	"strings"
	"testing"
)

// A password written in --redis without percent-encoding its '/', '?' or
// '#' (common in generated passwords) moves the rest of it out of the URL's
// user part: into the path, the query or the fragment, where nothing is
// hidden, and into go-redis's "invalid database number" error. Likewise a
// user:password given to a Cluster seed in &addr=. The password must show
// nowhere: not in the help's default, not in an error.
func TestReservedCharsInPasswordNotShown(t *testing.T) {
	closed := "127.0.0.1:1"
	for _, u := range []string{
		"redis://:123/" + secretPW + "@" + closed,
		"redis://default:123/" + secretPW + "@" + closed,
		"redis://default:123?" + secretPW + "@" + closed,
		"redis://default:123?" + secretPW + "=1@" + closed,
		"redis://default:123#" + secretPW + "@" + closed,
		"redis://" + closed + "?addr=u:" + secretPW + "@127.0.0.1:2",
	} {
		res := dlockRun(t, []string{envRedisURL + "=" + u}, "run", "--help")
		wantCode(t, res, 0)
		noSecret(t, "run --help with "+envRedisURL+"="+u, res.stdout+res.stderr)
		for _, args := range [][]string{{"inspect", "x"}, {"run", "x", "--", "true"}, {"doctor"}, {"unlock", "--force", "x"}} {
			res := dlockRun(t, nil, append([]string{"--redis", u}, args...)...)
			if res.code == 0 {
				t.Fatalf("dlock %v with --redis %s: exit 0", args, u)
			}
			noSecret(t, strings.Join(args, " ")+" with --redis "+u, res.stdout+res.stderr)
		}
	}
}
