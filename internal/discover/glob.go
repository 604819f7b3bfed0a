package discover

import "fmt"

// MaxPatternLen is the longest glob pattern Compile accepts, in bytes: four
// times the longest lock name, room for a name written entirely in escapes
// or small sets. It bounds a compiled pattern's size (a 256-entry table of
// one bit per element) and the work of one match.
const MaxPatternLen = 4096

// Pattern is a compiled Redis glob pattern. It reads the pattern exactly as
// the Redis server's SCAN MATCH and KEYS do: '*' any run of bytes, '?' one
// byte, "[abc]", "[a-z]" (a reversed range "[z-a]" is the same set),
// "[^...]" for the complement, '\' taking the next byte literally (inside a
// set too; a '\' ending the pattern is itself), and a '[' never closed is a
// set running to the pattern's end. Bytes, not runes: a multi-byte UTF-8
// character is one element per byte, as for Redis.
//
// Matching cannot backtrack: the pattern is a chain of elements (one byte
// each) in which a '*' lets its place absorb any byte, and Match follows
// every place the name could have reached at once, as a bit set, reading
// each byte of the name once. Its cost is len(name) times one word per 64
// elements of the pattern, whatever the pattern. A Pattern is immutable:
// safe for concurrent use.
type Pattern struct {
	words int      // 64-bit words of a set of places: (elements+1)/64 rounded up
	last  int      // the place reached after every element: a match
	admit []uint64 // 256 sets: admit[c*words:] has bit i when element i takes byte c
	stay  []uint64 // bit i when a '*' follows element i (place 0: the start)
}

// byteSet is a set of bytes, one bit each.
type byteSet [4]uint64

func (s *byteSet) add(c byte)      { s[c>>6] |= 1 << (c & 63) }
func (s *byteSet) has(c byte) bool { return s[c>>6]&(1<<(c&63)) != 0 }
func (s *byteSet) addRange(lo, hi byte) {
	if lo > hi {
		lo, hi = hi, lo
	}
	for c := int(lo); c <= int(hi); c++ {
		s.add(byte(c))
	}
}

// Compile reads pattern (see Pattern). It fails only on a pattern longer
// than MaxPatternLen: every other byte string is a Redis glob pattern.
func Compile(pattern string) (*Pattern, error) {
	if len(pattern) > MaxPatternLen {
		return nil, fmt.Errorf("glob pattern of %d bytes: the limit is %d", len(pattern), MaxPatternLen)
	}
	var elems []byteSet
	stars := []bool{false}
	for i := 0; i < len(pattern); {
		var s byteSet
		switch pattern[i] {
		case '*':
			stars[len(elems)] = true
			i++
			continue
		case '?':
			s = byteSet{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}
			i++
		case '[':
			s, i = readSet(pattern, i+1)
		case '\\':
			if i+1 < len(pattern) {
				i++
			}
			s.add(pattern[i])
			i++
		default:
			s.add(pattern[i])
			i++
		}
		elems = append(elems, s)
		stars = append(stars, false)
	}
	g := &Pattern{words: (len(elems) + 64) / 64, last: len(elems)}
	g.admit = make([]uint64, 256*g.words)
	g.stay = make([]uint64, g.words)
	for i, s := range elems {
		place := i + 1
		for c := 0; c < 256; c++ {
			if s.has(byte(c)) {
				g.admit[c*g.words+place/64] |= 1 << (place % 64)
			}
		}
	}
	for place, star := range stars {
		if star {
			g.stay[place/64] |= 1 << (place % 64)
		}
	}
	return g, nil
}

// readSet reads the set whose content begins at pattern[i] (after its '['),
// as Redis does, and returns it and the index after it.
func readSet(pattern string, i int) (byteSet, int) {
	var s byteSet
	not := i < len(pattern) && pattern[i] == '^'
	if not {
		i++
	}
read:
	for i < len(pattern) {
		switch {
		case pattern[i] == '\\' && i+1 < len(pattern):
			s.add(pattern[i+1])
			i += 2
		case pattern[i] == ']':
			i++
			break read
		case i+2 < len(pattern) && pattern[i+1] == '-':
			s.addRange(pattern[i], pattern[i+2])
			i += 3
		default:
			s.add(pattern[i])
			i++
		}
	}
	if not {
		for w := range s {
			s[w] = ^s[w]
		}
	}
	return s, i
}

// Match reports whether name matches the pattern.
func (g *Pattern) Match(name string) bool {
	if g.words == 1 {
		return g.match1(name)
	}
	at := make([]uint64, 2*g.words)
	cur, next := at[:g.words], at[g.words:]
	cur[0] = 1
	for i := 0; i < len(name); i++ {
		admit := g.admit[int(name[i])*g.words:][:g.words]
		alive := uint64(0)
		var carry uint64
		for w := range cur {
			// From every place: one element on if it takes the byte, or
			// stay where a '*' is.
			next[w] = (cur[w]<<1|carry)&admit[w] | cur[w]&g.stay[w]
			carry = cur[w] >> 63
			alive |= next[w]
		}
		if alive == 0 {
			return false
		}
		cur, next = next, cur
	}
	return cur[g.last/64]&(1<<(g.last%64)) != 0
}

// match1 is Match for patterns of at most 63 elements: one word, no
// allocation.
func (g *Pattern) match1(name string) bool {
	cur, stay := uint64(1), g.stay[0]
	for i := 0; i < len(name); i++ {
		cur = cur<<1&g.admit[name[i]] | cur&stay
		if cur == 0 {
			return false
		}
	}
	return cur>>g.last&1 != 0
}

// Glob reports whether name matches the Redis glob pattern (see Pattern).
// A pattern over MaxPatternLen matches nothing. It compiles the pattern on
// every call: compile it once with Compile to match many names.
func Glob(pattern, name string) bool {
	g, err := Compile(pattern)
	return err == nil && g.Match(name)
}
