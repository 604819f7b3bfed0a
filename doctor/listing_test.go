package doctor

import (
	"context"
	"slices"
	"testing"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// PUBSUB CHANNELS ignores ACL channel patterns: a tenant confined to ns:
// lists another tenant's client channel (its host and pid). Under a
// namespace the listing check warns while the user may run it, and passes
// once the ACL denies the listing commands; it asks the server without
// running them, so the ACL LOG stays empty.
func TestCheckListing(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := context.Background()
	setUser(t, srv, "svc", "on", ">pw", "resetkeys", "~ns:*", "resetchannels", "&ns:*", "+@all", "-@dangerous")
	other := client(t, srv.Addr(), "")
	ps := other.Subscribe(ctx, "other:dlock:client:billing-7/4242/0123456789abcdef")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	svc := client(t, srv.Addr(), "svc")
	chans, err := svc.PubSubChannels(ctx, "*").Result()
	if err != nil || !slices.Contains(chans, "other:dlock:client:billing-7/4242/0123456789abcdef") {
		t.Fatalf("PUBSUB CHANNELS as svc = %v, %v: the premise of the warning does not hold", chans, err)
	}
	if _, err := srv.Do(ctx, "acl", "log", "reset"); err != nil {
		t.Fatal(err)
	}

	r := check(t, svc, Options{Namespace: "ns"})
	want(t, r, NameListing, Warn, "PUBSUB CHANNELS, PUBSUB SHARDCHANNELS, SCAN", "other tenants' lock names and client ids",
		"-pubsub|channels -pubsub|shardchannels -scan")
	if log := aclLog(t, srv); len(log) != 0 {
		t.Fatalf("ACL LOG: %v", log)
	}
	if _, ok := check(t, other, Options{}).Get(NameListing); ok {
		t.Fatal("a listing check without a namespace")
	}

	setUser(t, srv, "svc", "-pubsub|channels", "-pubsub|shardchannels", "-scan")
	r = check(t, svc, Options{Namespace: "ns"})
	want(t, r, NameListing, OK, "denied")
	if log := aclLog(t, srv); len(log) != 0 {
		t.Fatalf("ACL LOG: %v", log)
	}
}
