package keys

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
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

// ErrBadNamespace is wrapped by every error NewSpace returns.
var ErrBadNamespace = errors.New("invalid namespace")

// NewSpace returns the Space of namespace ns, or an error wrapping
// ErrBadNamespace for a namespace that is empty, longer than
// MaxNamespaceLen, or holds anything but ASCII letters, digits, '_', '.'
// and '-'.
//
// Why so few characters: a namespace is data, but the scripts' variants
// splice it into their single-quoted channel literals (kind's script), so
// every accepted namespace must be inert there: none of these characters
// can end or escape a Lua string. And it has no ':', so the first ':' of a
// namespaced key ends the namespace: no two (namespace, name) pairs share
// a key ("a" with lock "b:x" would otherwise be "a:b" with lock "x", and
// one tenant could break the other's locks). None of them is an ACL or
// SCAN glob character or a hash-tag brace either.
func NewSpace(ns string) (Space, error) {
	switch {
	case ns == "":
		return Space{}, fmt.Errorf("%w: empty", ErrBadNamespace)
	case len(ns) > MaxNamespaceLen:
		return Space{}, fmt.Errorf("%w: %d bytes, the limit is %d", ErrBadNamespace, len(ns), MaxNamespaceLen)
	}
	for i := 0; i < len(ns); i++ {
		if !namespaceByte(ns[i]) {
			r, _ := utf8.DecodeRuneInString(ns[i:])
			return Space{}, fmt.Errorf("%w: %q holds %q; a namespace has only ASCII letters, digits, '_', '.' and '-'", ErrBadNamespace, ns, r)
		}
	}
	return Space{prefix: ns + ":"}, nil
}

// namespaceByte reports whether c may appear in a namespace.
func namespaceByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-'
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

// ShardChannel is ShardChannel under the Space (channel and key with the
// namespace): a stand-in begins with the namespace too.
func (s Space) ShardChannel(channel, key string) string {
	if sc := ShardChannel(channel, key); sc != channel {
		return s.prefix + sc
	}
	return channel
}

// IsClientChannel is IsClientChannel under the Space.
func (s Space) IsClientChannel(name, clientID string) bool {
	rest, ok := strings.CutPrefix(name, s.prefix)
	return ok && IsClientChannel(rest, clientID)
}

// TenantFence reads name, a name given without a namespace, as a tenant's:
// for "ns:rest" where ns is a valid namespace, it returns ns and the fencing
// counter that namespace ns's Client keeps for its lock rest. That Client's
// lock hash is the key name, but its companions (fencing counter, queue,
// forced set, channels) are not this name's: the two are not one lock.
func TenantFence(name string) (ns, fence string, ok bool) {
	ns, rest, found := strings.Cut(name, ":")
	if !found || rest == "" {
		return "", "", false
	}
	s, err := NewSpace(ns)
	if err != nil {
		return "", "", false
	}
	return ns, s.For(rest).Fence, true
}
