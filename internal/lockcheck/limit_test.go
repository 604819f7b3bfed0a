package lockcheck

import (
	"testing"
	"time"
)

func TestCheckLimit(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	holds := []Hold{
		{Owner: "a", Start: at(0), End: at(10)},
		{Owner: "b", Start: at(5), End: at(15)},
		{Owner: "c", Start: at(10), End: at(20)}, // starts as a ends: not three at once
	}
	if err := CheckLimit(append([]Hold(nil), holds...), 2); err != nil {
		t.Fatalf("two at a time reported as a violation: %v", err)
	}
	holds = append(holds, Hold{Owner: "d", Start: at(12), End: at(13)}) // b, c, d
	if err := CheckLimit(holds, 2); err == nil {
		t.Fatal("three holders at once not reported")
	}
}
