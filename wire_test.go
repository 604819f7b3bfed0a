package dlock

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/kind"
	"github.com/dlock-dev/dlock/internal/lease"
	"github.com/dlock-dev/dlock/internal/renew"
	"github.com/dlock-dev/dlock/internal/wire"
)

// The wire formats and key names are defined once on the Go side; the Lua
// scripts spell some of them out, and this test holds the two together.
func TestLuaLiteralsAgreeWithGo(t *testing.T) {
	lib := kind.Source("lib.lua")
	// The client channel a hand-off is published on.
	if !strings.Contains(lib, "publish('"+keys.ClientChannelPrefix+"' .. cid,") {
		t.Errorf("lib.lua does not publish hand-offs on %q", keys.ClientChannelPrefix+"<client id>")
	}
	// Redisson's channel names, as keys.For derives them: lib.lua's
	// redisson_name, run by the real server, must agree.
	rdb := rdbFor(t, shared)
	ctx := ctxT(t)
	for _, name := range []string{"coupon", "user:{42}", "a{b"} {
		ks := keys.For(name)
		for prefix, want := range map[string]string{"redisson_lock__channel": ks.Channel, "redisson_rwlock": ks.RWChannel} {
			got, err := rdb.Eval(ctx, lib+"\nreturn redisson_name(ARGV[1], ARGV[2])", nil, prefix, name).Text()
			if err != nil || got != want {
				t.Errorf("lib.lua's redisson_name(%q, %q) = %q, %v; Go says %q", prefix, name, got, err, want)
			}
			if !strings.Contains(lib+kind.Source("rwlib.lua")+kind.Source("force.lua"), "'"+prefix+"'") {
				t.Errorf("no script names %q", prefix)
			}
		}
	}
	// The hand-off message and the queue entry, in lib.lua's hand_off and
	// in release.lua's inline copy of its common case.
	for _, want := range []string{
		"local msg = string.format('%d', tok) .. ' ' .. string.format('%d', claim)",
		"publish('" + keys.ClientChannelPrefix + "' .. cid, ticket .. ' ' .. msg)",
	} {
		if !strings.Contains(lib, want) {
			t.Errorf("lib.lua's hand-off message is not \"<ticket> <token> <ttl ms>\" (keys.HandoffTicket): no %q", want)
		}
	}
	// A PopEntry's mark and its box (keys.PopEntry, keys.GrantBox), in
	// lib.lua's deliver, release.lua's inline copy and force.lua.
	box := keys.GrantBox("", "f")
	if box != "\x1fg:f" {
		t.Fatalf("keys.GrantBox(q, f) = q + %q, want q + \"\\x1fg:\" + f", box)
	}
	for script, wants := range map[string][]string{
		"lib.lua":     {"if string.sub(ttl, 1, 2) == '00' then", "local box = KEYS[3] .. '\\31g:' .. field"},
		"release.lua": {"local pop = string.sub(ttl, 1, 2) == '00'", "local box = pop and KEYS[3] .. '\\31g:' .. field"},
		"force.lua":   {"here('del', KEYS[3] .. '\\31g:' .. f)"},
	} {
		for _, want := range wants {
			if !strings.Contains(kind.Source(script), want) {
				t.Errorf("%s lacks %q (keys.PopEntry, keys.GrantBox)", script, want)
			}
		}
	}
	// The start of a fencing sequence, beside its counter (keys.FenceStart).
	if got := keys.FenceStart("c"); got != "c\x1fs" {
		t.Fatalf("keys.FenceStart(c) = %q, want c + \"\\x1fs\"", got)
	}
	if want := "local function fence_start(fence) return fence .. '\\31s' end"; !strings.Contains(lib, want) {
		t.Errorf("lib.lua lacks %q (keys.FenceStart)", want)
	}
	// release.lua's hand-off and pass drop an election's leader record
	// by its name (keys.LeaderField), as the DEL they replaced did.
	if want := "redis.call('hdel', KEYS[1], ARGV[1], '" + keys.LeaderField + "')"; strings.Count(kind.Source("release.lua"), want) != 2 {
		t.Errorf("release.lua's hand-off and pass do not both drop %q: no %q twice", keys.LeaderField, want)
	}
	if e := keys.PopEntry(7, 30000, "c:1"); strings.Split(e, " ")[1] != "0030000" {
		t.Errorf("keys.PopEntry = %q, want its TTL written as 0030000", e)
	} else if tk, ttl, f, ok := keys.ParseQueueEntry(e); !ok || tk != 7 || ttl != 30000 || f != "c:1" {
		t.Error("keys.PopEntry and ParseQueueEntry disagree")
	}
	if !strings.Contains(lib, `string.match(e, '^(%d+) (%d+) (.+)$')`) {
		t.Error("lib.lua does not read queue entries as \"<ticket> <ttl ms> <owner>\" (keys.QueueEntry)")
	}
	for _, want := range []string{
		"'" + keys.ClientChannelPrefix + "' .. cid,",
		"local msg = string.format('%d', tok) .. ' ' .. string.format('%d', claim)",
		"ticket .. ' ' .. msg)",
		`string.match(first, '^(%d+) (%d+) (.+)$')`,
		`string.match(field, '^(.*):')`,
	} {
		if !strings.Contains(kind.Source("release.lua"), want) {
			t.Errorf("release.lua's inline hand-off lacks %q (lib.lua's hand_off, keys.QueueEntry, keys.HandoffTicket)", want)
		}
	}
	// Redisson's channel, as release.lua's common case builds it inline.
	for _, name := range []string{"coupon", "user:{42}", "a{b"} {
		ks := keys.For(name)
		rdb.Del(ctx, name)
		sub := rdb.Subscribe(ctx, ks.Channel)
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		m := newClient(t, shared).Mutex(name)
		mustLock(t, m)
		mustUnlock(t, m)
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil || msg.Payload != "0" {
			t.Errorf("release of %q: %v, %v on %s; want \"0\"", name, msg, err, ks.Channel)
		}
		sub.Close()
	}
	if tk, ttl, f, ok := keys.ParseQueueEntry(keys.QueueEntry(7, 30000, "c:1")); !ok || tk != 7 || ttl != 30000 || f != "c:1" {
		t.Error("keys.QueueEntry and ParseQueueEntry disagree")
	}
	// keys.MutexEntry's mark, a TTL that begins with a zero, as release.lua
	// tests it (the byte 48, '0') and as Lua's tonumber still reads it.
	if e := keys.MutexEntry(7, 30000, "c:1"); strings.Split(e, " ")[1] != "030000" {
		t.Errorf("keys.MutexEntry = %q, want its TTL written as 030000", e)
	} else if tk, ttl, f, ok := keys.ParseQueueEntry(e); !ok || tk != 7 || ttl != 30000 || f != "c:1" {
		t.Error("keys.MutexEntry and ParseQueueEntry disagree")
	}
	if !strings.Contains(kind.Source("release.lua"), "if string.byte(ttl) == 48 and not pop then") {
		t.Error("release.lua does not look for keys.MutexEntry's mark")
	}
	// A pass's answer lies below every why_gone code.
	if m := regexp.MustCompile(`local PASSED = (-?\d+)`).FindStringSubmatch(kind.Source("release.lua")); m == nil || m[1] != "-16" {
		t.Errorf("release.lua's PASSED is %v, want -16 (kind.passed)", m)
	}
	// why_gone's codes.
	m := regexp.MustCompile(`local GONE, FORCED, DATA_LOST = (\d+), (\d+), (\d+)`).FindStringSubmatch(lib)
	if m == nil || m[1] != fmt.Sprint(lease.CodeGone) || m[2] != fmt.Sprint(lease.CodeForced) || m[3] != fmt.Sprint(lease.CodeDataLost) {
		t.Errorf("lib.lua's why_gone codes %v differ from goneCode, forcedCode, dataLostCode", m)
	}
}

// The record of long holds is written every keys.HeldEvery renewals, and
// renew.lua gives it HELD_TTLS TTLs to live from each write: it must
// outlive the renewals between two writes.
func TestHeldRecordOutlivesItsWrites(t *testing.T) {
	m := regexp.MustCompile(`local HELD_TTLS = (\d+)`).FindStringSubmatch(kind.Source("renew.lua"))
	if m == nil {
		t.Fatal("renew.lua has no HELD_TTLS")
	}
	if ttls, _ := strconv.Atoi(m[1]); ttls*renew.PerTTL <= keys.HeldEvery+renew.PerTTL {
		t.Fatalf("the record lives %s TTLs (%d renewals) but is written every %d renewals", m[1], ttls*renew.PerTTL, keys.HeldEvery)
	}
}

// Two readers of one RWMutex from Clients with different watchdog timeouts
// share the record of long holds: the shorter one's write must not cut the
// TTL the longer one gave it.
func TestHeldRecordTTLOnlyRises(t *testing.T) {
	rdb := rdbFor(t, shared)
	ctx := ctxT(t)
	src := wire.WithLib(kind.Source("lib.lua"), kind.Source("renew.lua"))
	const k, z, rec = "rec:ttl", "rec:ttl:z", "rec:ttl:held"
	t.Cleanup(func() { rdb.Del(context.Background(), k, z, rec) })
	if err := rdb.HSet(ctx, k, "long", 1, "short", 1).Err(); err != nil {
		t.Fatal(err)
	}
	// Each reader's own deadline, ahead of the server's clock: a share
	// past it is not renewed.
	until := float64(rdb.Time(ctx).Val().UnixMilli() + 60000)
	if err := rdb.ZAdd(ctx, z, redis.Z{Score: until, Member: "long"}, redis.Z{Score: until, Member: "short"}).Err(); err != nil {
		t.Fatal(err)
	}
	renewOne := func(owner string, ttl int) {
		t.Helper()
		keys := []string{k, z, "rec:ttl:fence", "rec:ttl:forced", rec}
		if err := rdb.Eval(ctx, src, keys, owner, ttl, "r", fmt.Sprintf("1 %d", ttl/3), "", 86400000).Err(); err != nil {
			t.Fatal(err)
		}
	}
	renewOne("long", 30000)
	renewOne("short", 3000)
	if ttl := rdb.PTTL(ctx, rec).Val(); ttl < 100*time.Second {
		t.Fatalf("record TTL %v after the short reader's write, want the long reader's 150s", ttl)
	}
}
