package main

import (
	"math"
	"math/bits"
	"slices"
	"time"
)

// hist is an allocation-free latency histogram: exact below 128 ns, then 64
// linear sub-buckets per power of two (relative error < 1.6%). Used where the
// sample count is unbounded (fixed-duration runs); one per goroutine, merged
// at the end.
type hist struct {
	counts [histBuckets]uint64
	n      uint64
	min    int64
	max    int64
}

const histBuckets = 58*64 + 64

func histIndex(v int64) int {
	if v < 0 {
		v = 0
	}
	if v < 128 {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - 7
	return shift*64 + int(v>>uint(shift))
}

// histValue is the midpoint of bucket i.
func histValue(i int) int64 {
	if i < 128 {
		return int64(i)
	}
	shift := uint(i/64 - 1)
	m := int64(i%64 + 64)
	lo := m << shift
	hi := (m+1)<<shift - 1
	return lo + (hi-lo)/2
}

func (h *hist) Record(d time.Duration) {
	v := int64(d)
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.counts[histIndex(v)]++
}

func (h *hist) Merge(o *hist) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	for i, c := range o.counts {
		h.counts[i] += c
	}
}

// Quantile returns the nearest-rank q-quantile (0 < q <= 1).
func (h *hist) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			v := histValue(i)
			v = max(v, h.min)
			v = min(v, h.max)
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}

// quantile returns the nearest-rank q-quantile of xs (sorted in place).
func quantile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	rank := int(math.Ceil(q * float64(len(xs))))
	rank = max(rank, 1)
	rank = min(rank, len(xs))
	return xs[rank-1]
}

// Summary is the median and range of one metric over the repetitions.
type Summary struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var med float64
	if n := len(s); n%2 == 1 {
		med = s[n/2]
	} else {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Summary{Median: med, Min: s[0], Max: s[len(s)-1]}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
