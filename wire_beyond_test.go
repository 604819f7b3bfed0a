package dlock

import (
	"github.com/dlock-dev/dlock/internal/kind"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
)

// The election's and semaphore's wire formats are defined in internal/keys;
// the scripts spell them out, and this test holds the two together.
func TestBeyondLuaLiteralsAgreeWithGo(t *testing.T) {
	// Semaphore hand-offs reach the waiter's client like a lock's, in
	// keys.HandoffTicket's format with token 0, read from keys.QueueEntry's.
	if !strings.Contains(kind.Source("sem_lib.lua"), "publish', '"+keys.ClientChannelPrefix+"' .. cid,") {
		t.Errorf("sem_lib.lua does not publish grants on %q", keys.ClientChannelPrefix+"<client id>")
	}
	if !strings.Contains(kind.Source("sem_lib.lua"), `string.match(e, '^(%d+) (%d+) (.+)$')`) {
		t.Error("sem_lib.lua does not read queue entries as keys.QueueEntry writes them")
	}
	if src := kind.Source("sem_lib.lua"); !strings.Contains(src, `local msg = '0 ' .. string.format('%d', claim)`) ||
		!strings.Contains(src, `ticket .. ' ' .. msg`) {
		t.Error("sem_lib.lua's grant message is not \"<ticket> 0 <ttl ms>\"")
	}
	// A popping waiter's grant, "0 <ttl ms>", goes to keys.GrantBox's key
	// (the queue's, US, "g:", the permit id) when its entry is keys.PopEntry's.
	if !strings.Contains(kind.Source("sem_lib.lua"), `string.sub(ttl, 1, 2) == '00' and KEYS[3] .. '\31g:' .. id`) ||
		keys.GrantBox("q", "c:1") != "q\x1fg:c:1" || !strings.Contains(keys.PopEntry(7, 30000, "c:1"), " 0030000 ") {
		t.Error("sem_lib.lua's box is not keys.GrantBox's key for a keys.PopEntry entry")
	}
	if tk, ok := keys.HandoffTicket("7 0 2000"); !ok || tk != 7 {
		t.Error("a semaphore grant message does not parse as a hand-off")
	}
	// The election's leader field and announcement, run by the real server.
	if !strings.Contains(kind.Source("election_announce.lua"), "hset', KEYS[1], '"+keys.LeaderField+"',") {
		t.Errorf("election_announce.lua does not write the field %q", keys.LeaderField)
	}
	rdb := rdbFor(t, shared)
	ctx := ctxT(t)
	ps := rdb.Subscribe(ctx, "wire:changes")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	rdb.HSet(ctx, "wire:election", "c:1", 1)
	rdb.PExpire(ctx, "wire:election", 10*time.Second)
	if n, err := rdb.Eval(ctx, kind.Source("election_announce.lua"), []string{"wire:election"}, "c:1", uint64(42), "v a l", "wire:changes").Int(); err != nil || n != 1 {
		t.Fatalf("announce: %v %v", n, err)
	}
	stored := rdb.HGet(ctx, "wire:election", keys.LeaderField).Val()
	if tok, v, ok := keys.ParseLeaderValue(stored); !ok || tok != 42 || v != "v a l" || stored != keys.LeaderValue(42, "v a l") {
		t.Errorf("stored leader %q", stored)
	}
	m, err := ps.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tok, v, ok := keys.ParseLeaderMessage(m.Payload); !ok || tok != 42 || v != "v a l" || m.Payload != keys.LeaderMessage(42, "v a l") {
		t.Errorf("announcement %q", m.Payload)
	}
	// The renewal kind of permits.
	if !strings.Contains(kind.Source("renew.lua"), "kind == 's'") {
		t.Error("renew.lua has no permit kind 's'")
	}
}
