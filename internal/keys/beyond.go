package keys

import (
	"strconv"
	"strings"
)

// Prefixes of the keys and channels of elections and semaphores. Each is
// turned into a name with Companion, so that every key of one election or
// semaphore shares the Cluster slot of its name, and discovery (SCAN MATCH
// prefix:*) finds them by prefix.
const (
	ElectionPrefix        = "dlock:election"         // the election's lock (a Mutex hash)
	ElectionChangesPrefix = "dlock:election-changes" // channel: each new leader
	SemaphorePrefix       = "dlock:semaphore"        // sorted set: permit id -> expiry (server ms)
	SemaphoreSizePrefix   = "dlock:semaphore-size"   // string: the number of permits
	SemaphoreQueuePrefix  = "dlock:semaphore-queue"  // list of QueueEntry: waiters, first first
	SemaphoreFreePrefix   = "dlock:semaphore-free"   // channel: "0" when a permit is freed with nobody queued
	SemaphoreSeenPrefix   = "dlock:semaphore-seen"   // sorted set: queue entry -> until when its waiter is alive (server ms), or minus its permit's deadline once granted
	LatchDownsPrefix      = "dlock:latch-downs"      // set: ids of a latch's recent count-downs
	LatchPrefix           = "dlock:latch"            // string: a latch dlock armed (its marker), for discovery
)

// PermitID is the member of a semaphore's sorted set for a permit of n
// permits taken by owner ("<client id>:<n>"): the owner itself for one
// permit, "<owner>#<n>" for more. sem_lib.lua's weight reads it back; as a
// queue entry's field it tells the scripts how many permits the waiter
// needs.
func PermitID(owner string, n int) string {
	if n <= 1 {
		return owner
	}
	return owner + "#" + strconv.Itoa(n)
}

// PermitWeight reverses PermitID: the number of permits a member holds
// (1 when it has no "#<n>" after the owner's ":<n>").
func PermitWeight(id string) int {
	i := strings.LastIndexByte(id, '#')
	if i < 0 {
		return 1
	}
	j := strings.LastIndexByte(id[:i], ':')
	if j < 0 || !digits(id[j+1:i]) || !digits(id[i+1:]) {
		return 1
	}
	n, err := strconv.Atoi(id[i+1:])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// digits reports whether s is a non-empty run of ASCII digits.
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// LeaderField is the field of an election's lock hash that holds the
// leader's "<token> <value>" (LeaderValue). It cannot be an owner field:
// owner fields are "<client id>:<n>".
const LeaderField = "leader"

// ElectionSet holds the names of one election.
type ElectionSet struct {
	Lock    string // the election's lock: a Mutex named "dlock:election:{name}"
	Changes string // channel on which each new leader is announced (LeaderMessage)
}

// Election returns the names for election name. name must have passed
// Validate.
func Election(name string) ElectionSet {
	return ElectionSet{
		Lock:    Companion(ElectionPrefix, name),
		Changes: Companion(ElectionChangesPrefix, name),
	}
}

// SemaphoreSet holds the names of one semaphore.
type SemaphoreSet struct {
	Permits string // sorted set: PermitID scored by its expiry, server clock in ms
	Size    string // the number of permits (set by the first Acquire, then by SetPermits)
	Queue   string // waiters for a direct grant, QueueEntry format, first first
	Seen    string // sorted set: queue entry -> until when its waiter is alive, server clock in ms
	Free    string // channel: "0" when a permit is freed and nobody is queued
}

// Semaphore returns the names for semaphore name. name must have passed
// Validate.
func Semaphore(name string) SemaphoreSet {
	return SemaphoreSet{
		Permits: Companion(SemaphorePrefix, name),
		Size:    Companion(SemaphoreSizePrefix, name),
		Queue:   Companion(SemaphoreQueuePrefix, name),
		Seen:    Companion(SemaphoreSeenPrefix, name),
		Free:    Companion(SemaphoreFreePrefix, name),
	}
}

// LatchSet holds the names of one count-down latch: Redisson's
// RCountDownLatch layout, and one companion of dlock's.
type LatchSet struct {
	Count   string // the count, a string named by the latch itself (Redisson's)
	Channel string // Redisson's latch channel: "0" when the count reached zero, "1" when one was set
	Downs   string // set: ids of the count-downs applied lately, so a resent one counts once
	// Marker is dlock's mark of a latch it armed: "<count> <call id>", the
	// count TrySetCount set and the id of the call that set it (a resend
	// of that call finds its own id and reports the count set), living as
	// long as the count and deleted with it at zero. The count, a plain
	// string, cannot be told from other strings; discovery (SCAN MATCH
	// LatchPrefix:*) finds the markers instead.
	Marker string
}

// Latch returns the names for latch name. name must have passed Validate.
func Latch(name string) LatchSet {
	return LatchSet{Count: name, Channel: LatchChannel(name), Downs: Companion(LatchDownsPrefix, name),
		Marker: Companion(LatchPrefix, name)}
}

// LatchChannel is Redisson's channel of the latch name. Unlike its lock
// channels, Redisson wraps the name in braces whatever it contains, with
// no ':' before them.
func LatchChannel(name string) string { return "redisson_countdownlatch__channel__{" + name + "}" }

// NameFromCompanion returns the name a companion key was made from
// (Companion's inverse): "prefix:{name}" or "prefix:{tag}:name".
func NameFromCompanion(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+":")
	if !ok || !strings.HasPrefix(rest, "{") {
		return "", false
	}
	var name string
	if i := strings.Index(rest, "}:"); i > 0 {
		name = rest[i+2:]
	} else {
		if !strings.HasSuffix(rest, "}") || len(rest) < 3 {
			return "", false
		}
		name = rest[1 : len(rest)-1]
	}
	return name, Validate(name) == nil && Companion(prefix, name) == key
}

// LeaderValue is what an election's hash holds in LeaderField: the
// leader's fencing token (its term) and its value, "<token> <value>".
// election_announce.lua writes it.
func LeaderValue(token uint64, value string) string {
	return strconv.FormatUint(token, 10) + " " + value
}

// ParseLeaderValue reverses LeaderValue.
func ParseLeaderValue(s string) (token uint64, value string, ok bool) {
	t, v, found := strings.Cut(s, " ")
	if !found {
		return 0, "", false
	}
	tok, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return 0, "", false
	}
	return tok, v, true
}

// LeaderMessage is what election_announce.lua publishes on the Changes
// channel when a leader takes office: "L <token> <value>".
func LeaderMessage(token uint64, value string) string { return "L " + LeaderValue(token, value) }

// ParseLeaderMessage reverses LeaderMessage.
func ParseLeaderMessage(msg string) (token uint64, value string, ok bool) {
	rest, found := strings.CutPrefix(msg, "L ")
	if !found {
		return 0, "", false
	}
	return ParseLeaderValue(rest)
}
