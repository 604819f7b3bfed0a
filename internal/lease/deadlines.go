package lease

import (
	"sync"
	"time"
)

// deadlines calls each hold's checkDeadline once its local deadline has
// passed: one timer for all the holds of a Client, over a min-heap by
// deadline, instead of a timer per hold (which would cost two allocations
// per acquisition, and most holds end long before their deadline).
type deadlines struct {
	// firing runs one fire at a time: the timer is re-armed before the
	// checks run, and a second fire must not check later deadlines before
	// the first has checked earlier ones.
	firing  sync.Mutex
	mu      sync.Mutex
	heap    []*Lease // ordered by dueAt; each hold knows its dueIndex
	timer   *time.Timer
	armed   time.Time // when timer fires; zero when it is stopped
	stopped bool
	check   func(*Lease)
}

func newDeadlines(check func(*Lease)) *deadlines {
	d := &deadlines{check: check}
	d.timer = time.AfterFunc(time.Hour, d.fire)
	d.timer.Stop()
	return d
}

// add schedules h's check at at, or moves it there when h is scheduled
// already (a fire that popped h races the caller that moves its deadline).
func (d *deadlines) add(h *Lease, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	h.dueAt = at
	if i := h.dueIndex; i >= 0 && i < len(d.heap) && d.heap[i] == h {
		d.down(i)
		d.up(h.dueIndex)
	} else {
		h.dueIndex = len(d.heap)
		d.heap = append(d.heap, h)
		d.up(h.dueIndex)
	}
	// Most holds fall due after the one the timer waits for: the timer is
	// moved only for an earlier one.
	if d.armed.IsZero() || at.Before(d.armed) {
		d.armed = at
		d.timer.Reset(time.Until(at))
	}
}

// remove unschedules h, if it is scheduled. The timer is left as it is: when
// it fires for nothing it stops.
func (d *deadlines) remove(h *Lease) {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := h.dueIndex
	if i < 0 || i >= len(d.heap) || d.heap[i] != h {
		return
	}
	last := len(d.heap) - 1
	d.swap(i, last)
	d.heap[last] = nil
	d.heap = d.heap[:last]
	h.dueIndex = -1
	if i < last {
		d.down(i)
		d.up(i)
	}
}

// fire checks every hold whose deadline has passed and re-arms the timer
// for the next one.
func (d *deadlines) fire() {
	d.firing.Lock()
	defer d.firing.Unlock()
	now := time.Now()
	var due []*Lease
	d.mu.Lock()
	for len(d.heap) > 0 && !d.heap[0].dueAt.After(now) {
		h := d.heap[0]
		last := len(d.heap) - 1
		d.swap(0, last)
		d.heap[last] = nil
		d.heap = d.heap[:last]
		h.dueIndex = -1
		d.down(0)
		due = append(due, h)
	}
	d.armed = time.Time{}
	if len(d.heap) > 0 {
		d.armed = d.heap[0].dueAt
		d.timer.Reset(d.armed.Sub(now))
	}
	d.mu.Unlock()
	for _, h := range due {
		d.check(h)
	}
}

// stop stops the timer for good (Close).
func (d *deadlines) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	d.timer.Stop()
	d.armed = time.Time{}
	for _, h := range d.heap {
		h.dueIndex = -1
	}
	d.heap = nil
}

func (d *deadlines) less(i, j int) bool { return d.heap[i].dueAt.Before(d.heap[j].dueAt) }

func (d *deadlines) swap(i, j int) {
	d.heap[i], d.heap[j] = d.heap[j], d.heap[i]
	d.heap[i].dueIndex = i
	d.heap[j].dueIndex = j
}

func (d *deadlines) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !d.less(i, p) {
			return
		}
		d.swap(i, p)
		i = p
	}
}

func (d *deadlines) down(i int) {
	n := len(d.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && d.less(r, l) {
			m = r
		}
		if !d.less(m, i) {
			return
		}
		d.swap(i, m)
		i = m
	}
}
