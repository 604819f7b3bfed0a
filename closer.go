package dlock

import "context"

// closer is what Close ends besides lock holds: semaphore permits (told of
// the end, then released) and Observe subscriptions (stopped). closeWith
// runs on a goroutine of its own, bounded by ctx.
type closer interface {
	closeWith(ctx context.Context) error
}

// trackOther registers o for Close; it refuses (false) once Close has begun.
func (c *Client) trackOther(o closer) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return false
	}
	if c.others == nil {
		c.others = make(map[closer]struct{})
	}
	c.others[o] = struct{}{}
	return true
}

func (c *Client) untrackOther(o closer) {
	c.mu.Lock()
	delete(c.others, o)
	c.mu.Unlock()
}
