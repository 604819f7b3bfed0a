// Package keys derives the Redis key and channel names dlock uses for a lock
// name, and validates names before any network call.
//
// The lock key is the name itself (Redisson's layout). Companion keys (fencing
// counter, waiter queue, forced set) must live in the same Redis Cluster slot
// as the lock key so that one script can touch them all. Redis hashes only the
// part of a key between the first '{' and the next '}' when that part is not
// empty (the hash tag). A companion therefore reuses the name's own hash tag
// when it has one and wraps the whole name in braces when it has none.
package keys

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameLen is the longest lock name accepted, in bytes. Redis allows far
// longer keys; a lock name longer than this is almost certainly a bug (a
// payload used as a name) and would bloat every message and script call.
const MaxNameLen = 1024

// ErrBadName is wrapped by every error Validate returns.
var ErrBadName = errors.New("invalid lock name")

// Validate reports whether name can be used as a lock name: non-empty, at most
// MaxNameLen bytes, valid UTF-8, free of control characters, not one of
// dlock's own keys (ReservedPrefix), and free of a '}' that is not closing a
// hash tag (such a name has no companion key in its slot, see HashTag).
func Validate(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrBadName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrBadName, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: not valid UTF-8", ErrBadName)
	}
	if i := strings.IndexFunc(name, unicode.IsControl); i >= 0 {
		r, _ := utf8.DecodeRuneInString(name[i:])
		return fmt.Errorf("%w: %q holds the control character %U", ErrBadName, name, r)
	}
	if reserved(name) {
		return fmt.Errorf("%w: %q begins with %q, which only dlock's own keys do", ErrBadName, name, ReservedPrefix)
	}
	if _, ok := HashTag(name); !ok && strings.IndexByte(name, '}') >= 0 {
		return fmt.Errorf("%w: %q contains '}' outside a Redis hash tag", ErrBadName, name)
	}
	return nil
}

// ReservedPrefix begins every key dlock makes beside a lock (its fencing
// counter, queue, forced set, ...). A lock named like one of them would be
// that key: Mutex("dlock:fence:{acct}") would make the fencing counter of
// lock "acct" a hash, and every grant of "acct" would fail with WRONGTYPE.
// So Validate refuses names that begin with it, but for an election's lock
// (Companion(ElectionPrefix, name)): that is a Mutex hash, which the
// Election handle takes by that name.
const ReservedPrefix = "dlock:"

// reserved reports whether name is one of dlock's own keys.
func reserved(name string) bool {
	if !strings.HasPrefix(name, ReservedPrefix) {
		return false
	}
	_, election := NameFromCompanion(ElectionPrefix, name)
	return !election
}

// HashTag returns the part of key that Redis Cluster hashes to pick a slot,
// and whether key has a hash tag at all (by Redis' rule: the bytes between the
// first '{' and the first '}' after it, when there is at least one).
func HashTag(key string) (string, bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return "", false
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return "", false
	}
	return key[open+1 : open+1+end], true
}

// Companion returns the key prefix+":"+... that hashes to the same Cluster
// slot as the lock key name, distinct for distinct names. name must have
// passed Validate.
//
// A name without a hash tag has no '}' (Validate), so "prefix:{name}" hashes
// exactly name. A name with tag T becomes "prefix:{T}:name": T has no '}', so
// the companion's tag is T again, and the name follows whole. Both forms
// determine the name they came from ("prefix:{name}" never contains "}:"
// before its end), so no two names share a companion: "X" and "{X}" map to
// "prefix:{X}" and "prefix:{X}:{X}".
func Companion(prefix, name string) string {
	if tag, ok := HashTag(name); ok {
		return prefix + ":{" + tag + "}:" + name
	}
	return prefix + ":{" + name + "}"
}

// HeldPrefix names a lock's record of long holds: a hash of owner ->
// "<granted ms> <renewal period ms>" (HeldRecord) that renewals write, so that an
// operator sees how long a renewed hold has lasted (Held).
const HeldPrefix = "dlock:held"

// Held is the record of long holds of the lock name.
func Held(name string) string { return Companion(HeldPrefix, name) }

// HeldEvery is how many renewals of a hold apart its record is written:
// a hold's grant time and renewal period do not change, so writing them
// at every renewal would only double the renewal's cost to Redis.
const HeldEvery = 9

// HeldRecord is a field of Held: when the hold was granted (ms since the
// epoch, by the holder's clock) and its renewal period in ms, from which
// Inspect tells how long it has been held and about how often renewed.
func HeldRecord(grantedMs, periodMs int64) string {
	return strconv.FormatInt(grantedMs, 10) + " " + strconv.FormatInt(periodMs, 10)
}

// ParseHeldRecord reads a HeldRecord.
func ParseHeldRecord(v string) (grantedMs, periodMs int64, ok bool) {
	a, b, found := strings.Cut(v, " ")
	if !found {
		return 0, 0, false
	}
	g, err1 := strconv.ParseInt(a, 10, 64)
	r, err2 := strconv.ParseInt(b, 10, 64)
	return g, r, err1 == nil && err2 == nil
}

// Set holds every Redis name derived from one lock name.
type Set struct {
	Lock    string // the lock hash: the name itself, as in Redisson
	Channel string // Redisson's release channel
	Fence   string // last fencing token issued for the name
	Queue   string // registered waiters, for direct hand-off
	Forced  string // owner fields ForceUnlock took the lock from, so their holders learn why

	// Read-write locks only.
	RWChannel string // Redisson's RReadWriteLock channel
	Readers   string // read-hold deadlines (server clock), a sorted set
	Writers   string // writers waiting, which hold new readers back, a sorted set
}

// For returns the names for lock name. name must have passed Validate.
func For(name string) Set {
	return Set{
		Lock:    name,
		Channel: LockChannel(name),
		Fence:   Companion("dlock:fence", name),
		Queue:   Companion("dlock:queue", name),
		Forced:  Companion("dlock:forced", name),

		RWChannel: redissonName("redisson_rwlock", name),
		Readers:   Companion("dlock:readers", name),
		Writers:   Companion("dlock:wwait", name),
	}
}

// ForMutex returns the names a Mutex needs on every call (Lock, Fence, Queue
// and Forced) built in one allocation, with the others left empty: a handle
// made per acquisition needs no more. name must have passed Validate.
func ForMutex(name string) Set {
	prefixes := [...]string{"dlock:fence", "dlock:queue", "dlock:forced"}
	tag, tagged := HashTag(name)
	var b strings.Builder
	n := 0
	for _, p := range prefixes {
		n += len(p) + 3 + len(name)
		if tagged {
			n += len(tag) + 1
		}
	}
	b.Grow(n)
	var ends [len(prefixes)]int
	for i, p := range prefixes {
		b.WriteString(p)
		if tagged {
			b.WriteString(":{")
			b.WriteString(tag)
			b.WriteString("}:")
			b.WriteString(name)
		} else {
			b.WriteString(":{")
			b.WriteString(name)
			b.WriteString("}")
		}
		ends[i] = b.Len()
	}
	all := b.String()
	return Set{Lock: name, Fence: all[:ends[0]], Queue: all[ends[0]:ends[1]], Forced: all[ends[1]:ends[2]]}
}

// LockChannel is Redisson's release channel of the lock name (Set.Channel).
func LockChannel(name string) string { return redissonName("redisson_lock__channel", name) }

// redissonName is Redisson's prefixName: a name that already contains '{' is
// appended as it is (its own hash tag decides), any other is wrapped in braces.
func redissonName(prefix, name string) string {
	if strings.IndexByte(name, '{') >= 0 {
		return prefix + ":" + name
	}
	return prefix + ":{" + name + "}"
}

// ClientChannel is the channel on which the client with the given id receives
// direct hand-offs.
func ClientChannel(clientID string) string { return ClientChannelPrefix + clientID }

// ShardClientChannel is the client channel of clientID in the Cluster slot
// of lockKey, "dlock:client:{<Hashed(lockKey)>}:<client id>": with sharded
// pub/sub a hand-off stays in the shard of the lock it is about, so each
// client has a channel per slot it waits in. It follows ShardChannel's rule
// by construction (ShardChannel leaves it as it is). The scripts build the
// same name from KEYS[1] (the shard_client function the sharded scripts
// begin with).
func ShardClientChannel(clientID, lockKey string) string {
	return ClientChannelPrefix + "{" + Hashed(lockKey) + "}:" + clientID
}

// Hashed returns the bytes of key that Redis Cluster hashes to pick its
// slot: its hash tag (HashTag) when it has one, else the whole key.
func Hashed(key string) string {
	if tag, ok := HashTag(key); ok {
		return tag
	}
	return key
}

// ShardChannelPrefix begins the stand-in ShardChannel gives a channel that
// hashes away from its key's slot.
const ShardChannelPrefix = "dlock:shard:"

// ShardChannel is the channel that stands for channel in sharded pub/sub
// mode (SPUBLISH, SSUBSCRIBE) when the messages on it are about key. This
// is the one rule for every sharded channel of every kind, and the scripts
// apply the same rule to every channel they publish on (kind's spublish,
// from KEYS[1]), so that both sides name the same channel:
//
//   - channel itself when Redis hashes the same bytes of it as of key
//     (Hashed), so it lives in key's slot. This keeps Redisson's channels,
//     and Redisson 3.22+'s sharded waiting on them, for every name whose
//     Redisson channel is in its key's slot: any name without '{', a lock
//     name with a hash tag, a latch name without one. Companion channels (a semaphore's free channel,
//     an election's changes) and client channels (ShardClientChannel) are
//     always in their key's slot and are left as they are.
//   - otherwise "dlock:shard:{<Hashed(key)>}:<channel>", in key's slot,
//     since Hashed(key) never holds a '}' (a name without a hash tag has
//     none, see Validate). That is the case of Redisson's lock and
//     read-write lock channels for a name with an unclosed '{' ("a{b":
//     Redisson appends it without braces, and the channel hashes whole),
//     and of its latch channel for a latch name with a hash tag ("{t}x":
//     Redisson wraps it in braces again, and the channel hashes "{t").
//
// What cannot be fixed: Redis refuses a script's SPUBLISH on a channel of
// another slot (7.0 lets it through only while both slots happen to be on
// one node, which a reshard undoes), so for those names Redisson's channel
// cannot carry a sharded message from any script, Redisson's included, and
// sharded mode has no Redisson peer to stay compatible with: a dlock waiter
// does not hear a Redisson release of such a name, nor a Redisson waiter a
// dlock one (each falls back to its re-checks). Without sharding nothing
// changes: every channel is Redisson's.
func ShardChannel(channel, key string) string {
	h := Hashed(key)
	if Hashed(channel) == h {
		return channel
	}
	return ShardChannelPrefix + "{" + h + "}:" + channel
}

// IsClientChannel reports whether name is clientID's channel, classic or of
// a slot (ShardClientChannel).
func IsClientChannel(name, clientID string) bool {
	rest, ok := strings.CutPrefix(name, ClientChannelPrefix)
	if !ok {
		return false
	}
	return rest == clientID || strings.HasPrefix(rest, "{") && strings.HasSuffix(rest, "}:"+clientID)
}

// ClientChannelPrefix starts every client channel; the scripts (lib.lua)
// build the channel from it and the client id in a queue entry's owner.
const ClientChannelPrefix = "dlock:client:"

// QueueEntry is a waiter's entry in a lock's queue, "<ticket> <ttl ms>
// <owner field>": the ticket its client's hub knows it by, the TTL it asked
// for, and its owner field ("<client id>:<n>", which names the client
// channel to tell). lib.lua's hand_off reads this format.
func QueueEntry(ticket uint64, ttlMs int64, field string) string {
	return strconv.FormatUint(ticket, 10) + " " + strconv.FormatInt(ttlMs, 10) + " " + field
}

// MutexEntry is a Mutex waiter's QueueEntry with its TTL written with a
// leading zero: the mark of a waiter whose attempt that claims a hand-off
// takes its fencing token itself (INCR), so that the release that hands the
// lock to it takes none (release.lua): one counter command per grant, not
// an INCR and a GET. An entry without the mark is an older dlock's waiter,
// which reads the token the hand-off issued. Lua's tonumber and
// ParseQueueEntry read both TTLs alike.
func MutexEntry(ticket uint64, ttlMs int64, field string) string {
	return strconv.FormatUint(ticket, 10) + " 0" + strconv.FormatInt(ttlMs, 10) + " " + field
}

// PopEntry is a waiter's QueueEntry with its TTL written with two leading
// zeros: the mark of a waiter that pops its grant from its box (GrantBox)
// with a blocking pop on a connection of its own, so the release that
// hands it the lock puts "<token> <claim ms>" there instead of publishing:
// a Mutex's with the token it takes (lib.lua's deliver), a semaphore's
// with token 0 (sem_lib.lua's grant_queued). An older dlock reads a
// Mutex's mark as MutexEntry's, and a semaphore's as a plain TTL, and
// publishes, which the waiter also hears.
func PopEntry(ticket uint64, ttlMs int64, field string) string {
	return strconv.FormatUint(ticket, 10) + " 00" + strconv.FormatInt(ttlMs, 10) + " " + field
}

// GrantBox is where a hand-off to a PopEntry waiter is put: a list next to
// the lock's queue (queue is the queue's key, so the box has the queue's
// namespace and Cluster slot), one per owner field. The control character
// after the queue (US, 0x1f) keeps it apart from every other lock's keys,
// whose names and client ids Validate and WithClientID keep free of control
// characters (":g:" let lock "{a}:g:<field>"'s queue be lock "{a}"'s box).
// Lua writes it '\31'.
func GrantBox(queue, field string) string { return queue + "\x1fg:" + field }

// FenceStart names the key beside a fencing counter (fence is the
// counter's key) that holds the first token of the counter's current
// sequence, with the counter's TTL: lib.lua's issue_token writes it and
// why_gone reads it, to tell a holder whose lock Redis lost and granted
// again from one whose own release was resent, to the microsecond. Like
// GrantBox's, the control character (US, 0x1f) keeps it apart from every
// lock's keys and in the counter's Cluster slot. Lua writes it '\31'.
func FenceStart(fence string) string { return fence + "\x1fs" }

// ParseQueueEntry reverses QueueEntry, MutexEntry and PopEntry.
func ParseQueueEntry(e string) (ticket uint64, ttlMs int64, field string, ok bool) {
	parts := strings.SplitN(e, " ", 3)
	if len(parts) != 3 || parts[2] == "" {
		return 0, 0, "", false
	}
	t, err1 := strconv.ParseUint(parts[0], 10, 64)
	ttl, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, "", false
	}
	return t, ttl, parts[2], true
}

// HandoffTicket reads the ticket from a hand-off message, "<ticket> <token>
// <ttl ms>" as lib.lua's hand_off publishes it on the new holder's client
// channel (the semaphore's carries token 0). Only the ticket is read: the
// message says which waiter to wake, and nothing in it is trusted, since
// anyone who may PUBLISH can send it. The waiter learns its token and TTL
// from its own attempt in Redis.
func HandoffTicket(msg string) (ticket uint64, ok bool) {
	if i := strings.IndexByte(msg, ' '); i >= 0 {
		msg = msg[:i]
	}
	t, err := strconv.ParseUint(msg, 10, 64)
	return t, err == nil
}

// ForcedMessage is what force.lua publishes on the client channel of each
// owner it evicted from lockKey: "forced <lock key>". It is only a hint to
// check Redis at once rather than at the next renewal, since anyone who may
// PUBLISH can send it.
func ForcedMessage(lockKey string) string { return forcedPrefix + lockKey }

const forcedPrefix = "forced "

// ParseForcedMessage reverses ForcedMessage.
func ParseForcedMessage(msg string) (lockKey string, ok bool) {
	lockKey, ok = strings.CutPrefix(msg, forcedPrefix)
	return lockKey, ok && lockKey != ""
}

// ParseClientID splits a client id made by dlock.New's default,
// "<host>/<pid>/<random>", into its host and process id; ok is false for an
// id set with WithClientID in another form (a Redisson UUID, say). An owner
// field "<client id>:<n>" (Holder.Owner) is accepted as well. Safe for
// concurrent use.
func ParseClientID(id string) (host string, pid int, ok bool) {
	if i := strings.LastIndexByte(id, ':'); i >= 0 {
		id = id[:i]
	}
	parts := strings.Split(id, "/")
	if len(parts) != 3 || parts[0] == "" || len(parts[2]) != 16 {
		return "", 0, false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil || pid <= 0 {
		return "", 0, false
	}
	return parts[0], pid, true
}

// NewClientID returns "<host>/<pid>/<16 hex digits>": unique among live
// clients (64 random bits on top of host and process), and telling an
// operator who inspects a lock which host and process holds it (see
// ParseClientID). Redisson uses a random UUID for the same purpose.
func NewClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	host = strings.Map(func(r rune) rune {
		if r <= ' ' || r == ':' || r == '/' || r == 0x7f {
			return '_'
		}
		return r
	}, host)
	if len(host) > 64 {
		host = host[:64]
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return host + "/" + strconv.Itoa(os.Getpid()) + "/" + hex.EncodeToString(b[:])
}
