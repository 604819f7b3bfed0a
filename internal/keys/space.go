package keys

import (
	"fmt"
	"strings"
	"unicode"
)

// Space is a namespace: every key and channel of a Client that uses it
// begins with its prefix "ns:", so that an ACL can grant a service its own
// prefix (~ns:* &ns:*) and nothing else. The lock named N is the hash at
// "ns:N" (what Redisson's NameMapper with prefix "ns:" gives); its
// companions and channels are the default ones, built from "ns:N", behind
// "ns:". The zero Space is no namespace: today's layout. A Space is a
// value; safe to copy and share.
type Space struct{ prefix string }

// MaxNamespaceLen is the longest namespace NewSpace accepts, in bytes.
const MaxNamespaceLen = 64

// NewSpace returns the Space of namespace ns, or an error for a namespace
// that is empty, longer than MaxNamespaceLen, or holds a character that
// would change a key's hash tag or an ACL pattern: { } * ? [ ], whitespace
// or a control character.
func NewSpace(ns string) (Space, error) {
	switch {
	case ns == "":
		return Space{}, fmt.Errorf("empty namespace")
	case len(ns) > MaxNamespaceLen:
		return Space{}, fmt.Errorf("namespace of %d bytes, the limit is %d", len(ns), MaxNamespaceLen)
	}
	for _, r := range ns {
		if strings.ContainsRune("{}*?[]", r) || unicode.IsSpace(r) || unicode.IsControl(r) {
			return Space{}, fmt.Errorf("namespace %q holds %q", ns, r)
		}
	}
	return Space{prefix: ns + ":"}, nil
}

// Prefix returns "ns:", or "" for no namespace.
func (s Space) Prefix() string { return s.prefix }

// Key returns the lock key of the name: "ns:name".
func (s Space) Key(name string) string { return s.prefix + name }

// Name returns the name a key of this Space was made from (Key's
// inverse), and whether key belongs to the Space.
func (s Space) Name(key string) (string, bool) { return strings.CutPrefix(key, s.prefix) }

// companion is Companion under the Space: prefix and name both behind it.
func (s Space) companion(prefix, name string) string {
	return s.prefix + Companion(prefix, s.prefix+name)
}

// NameFromCompanion is NameFromCompanion under the Space: the name (without
// the namespace) a companion key of prefix was made from.
func (s Space) NameFromCompanion(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, s.prefix)
	if !ok {
		return "", false
	}
	name, ok := NameFromCompanion(prefix, rest)
	if !ok {
		return "", false
	}
	return s.Name(name)
}

// For is For under the Space.
func (s Space) For(name string) Set {
	if s.prefix == "" {
		return For(name)
	}
	k := s.Key(name)
	return Set{
		Lock:      k,
		Channel:   s.prefix + LockChannel(k),
		Fence:     s.companion("dlock:fence", name),
		Queue:     s.companion("dlock:queue", name),
		Forced:    s.companion("dlock:forced", name),
		RWChannel: s.prefix + redissonName("redisson_rwlock", k),
		Readers:   s.companion("dlock:readers", name),
		Writers:   s.companion("dlock:wwait", name),
	}
}

// ForMutex is ForMutex under the Space.
func (s Space) ForMutex(name string) Set {
	if s.prefix == "" {
		return ForMutex(name)
	}
	f := s.For(name)
	return Set{Lock: f.Lock, Fence: f.Fence, Queue: f.Queue, Forced: f.Forced}
}

// LockChannel is LockChannel under the Space.
func (s Space) LockChannel(name string) string {
	return s.prefix + LockChannel(s.Key(name))
}

// Held is the record of long holds of the lock at lockKey (the lock's key,
// namespace included) under the Space.
func (s Space) Held(lockKey string) string { return s.prefix + Companion(HeldPrefix, lockKey) }

// Election is Election under the Space: the default names behind the
// prefix, so that the election's lock is the Mutex named
// Companion(ElectionPrefix, name) of the Space.
func (s Space) Election(name string) ElectionSet {
	e := Election(name)
	return ElectionSet{Lock: s.prefix + e.Lock, Changes: s.prefix + e.Changes}
}

// Semaphore is Semaphore under the Space.
func (s Space) Semaphore(name string) SemaphoreSet {
	return SemaphoreSet{
		Permits: s.companion(SemaphorePrefix, name),
		Size:    s.companion(SemaphoreSizePrefix, name),
		Queue:   s.companion(SemaphoreQueuePrefix, name),
		Seen:    s.companion(SemaphoreSeenPrefix, name),
		Free:    s.companion(SemaphoreFreePrefix, name),
	}
}

// Latch is Latch under the Space.
func (s Space) Latch(name string) LatchSet {
	k := s.Key(name)
	return LatchSet{Count: k, Channel: s.prefix + LatchChannel(k), Downs: s.companion(LatchDownsPrefix, name),
		Marker: s.companion(LatchPrefix, name)}
}

// ClientChannel is ClientChannel under the Space.
func (s Space) ClientChannel(clientID string) string {
	return s.prefix + ClientChannel(clientID)
}

// ShardClientChannel is ShardClientChannel under the Space (lockKey is the
// lock's key, namespace included).
func (s Space) ShardClientChannel(clientID, lockKey string) string {
	return s.prefix + ShardClientChannel(clientID, lockKey)
}

// IsClientChannel is IsClientChannel under the Space.
func (s Space) IsClientChannel(name, clientID string) bool {
	rest, ok := strings.CutPrefix(name, s.prefix)
	return ok && IsClientChannel(rest, clientID)
}
