package lockcheck

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCheck(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cases := []struct {
		name  string
		holds []Hold
		ok    bool
	}{
		{"sequential", []Hold{{Owner: "a", Token: 1, Start: at(0), End: at(5)}, {Owner: "b", Token: 2, Start: at(6), End: at(9)}}, true},
		{"overlap", []Hold{{Owner: "a", Token: 1, Start: at(0), End: at(5)}, {Owner: "b", Token: 2, Start: at(4), End: at(9)}}, false},
		{"token backwards", []Hold{{Owner: "a", Token: 5, Start: at(0), End: at(5)}, {Owner: "b", Token: 3, Start: at(6), End: at(9)}}, false},
		{"token repeated", []Hold{{Owner: "a", Token: 5, Start: at(0), End: at(5)}, {Owner: "b", Token: 5, Start: at(6), End: at(9)}}, false},
		{"readers share", []Hold{{Owner: "r1", Shared: true, Start: at(0), End: at(5)}, {Owner: "r2", Shared: true, Start: at(1), End: at(7)}, {Owner: "w", Token: 1, Start: at(8), End: at(9)}}, true},
		{"writer during reader", []Hold{{Owner: "r1", Shared: true, Start: at(0), End: at(5)}, {Owner: "w", Token: 1, Start: at(3), End: at(4)}}, false},
		{"reader during writer", []Hold{{Owner: "w", Token: 1, Start: at(0), End: at(5)}, {Owner: "r", Shared: true, Start: at(3), End: at(4)}}, false},
		{"end before start", []Hold{{Owner: "a", Start: at(5), End: at(1)}}, false},
	}
	for _, c := range cases {
		err := Check(c.holds)
		if (err == nil) != c.ok {
			t.Errorf("%s: Check = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}
