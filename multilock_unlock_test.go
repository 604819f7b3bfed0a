package dlock

import (
	"testing"
	"time"
)

// MultiLock.Unlock with the context LockContext returned releases every
// member and answers nil.
func TestMultiLockUnlockWithItsContext(t *testing.T) {
	ctx := ctxT(t)
	c := newClient(t, shared)
	ml := c.MultiLock(c.Mutex("ml:multi-unlock:a"), c.Mutex("ml:multi-unlock:b"), c.RWMutex("ml:multi-unlock:c").RLocker())
	hctx, err := ml.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ml.Unlock(hctx); err != nil {
		t.Errorf("Unlock with the MultiLock's context: %v", err)
	}
	for _, n := range ml.Names() {
		waitGone(t, c, n, 5*time.Second)
	}
}
