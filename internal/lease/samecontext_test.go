package lease

import (
	"context"
	"testing"
)

// uncomparableCtx is a context value that == cannot compare (it holds a
// map), as some frameworks' request contexts are.
type uncomparableCtx struct {
	context.Context
	m map[string]int
}

func TestSameContext(t *testing.T) {
	bg := context.Background()
	req := uncomparableCtx{bg, map[string]int{}}
	twin := uncomparableCtx{bg, map[string]int{}} // equal, not the same
	a, b := context.WithoutCancel(req), context.WithoutCancel(req)
	cancelled, cancel := context.WithCancel(bg)
	defer cancel()
	for _, tc := range []struct {
		name string
		x, y context.Context
		want bool
	}{
		{"one pointer context", cancelled, cancelled, true},
		{"two pointer contexts", cancelled, bg, false},
		{"WithoutCancel of one uncomparable context, twice", a, b, true},
		{"WithoutCancel of two equal uncomparable contexts", a, context.WithoutCancel(twin), false},
		{"an uncomparable context itself", req, req, true},
		{"nil", nil, nil, false},
	} {
		if got := sameContext(tc.x, tc.y); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
