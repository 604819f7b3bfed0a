package kind

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A pass's reply names the highest token it took: the next holder's own is
// that less the spare ones. A reply too small to carry them (only a
// malformed one can be) is an error: read as a pass, it gave token 0 or a
// wrapped-around one.
func TestPassReplyCarriesItsSpareTokens(t *testing.T) {
	reply := func(v int64) *redis.IntCmd {
		cmd := redis.NewIntCmd(context.Background())
		cmd.SetVal(v)
		return cmd
	}
	for _, fair := range []bool{false, true} {
		p := &Mutex{fair: fair}
		spare := int64(p.Spare())
		for _, top := range []int64{1, spare, spare + 1, 1_700_000_000_000_000} {
			r, tok, err := p.PassReply(reply(passed - top))
			if top <= spare {
				if err == nil {
					t.Errorf("fair=%v: a pass naming top %d with %d spare tokens decoded as (%+v, %d)", fair, top, spare, r, tok)
				}
				continue
			}
			if err != nil || !r.Found || tok != uint64(top) || tok-uint64(spare) < 1 {
				t.Errorf("fair=%v: a pass naming top %d: (%+v, %d, %v)", fair, top, r, tok, err)
			}
		}
	}
}
