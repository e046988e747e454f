package rank

import (
	"fmt"
	"math"
)

// Greedy picks the highest logit of each row (the lowest token ID on a
// tie). A row holding NaN or +Inf is an error for that row alone.
type Greedy struct{}

var _ Picker = Greedy{}

// Pick takes each row's argmax; it reads no request parameters, so reqs
// may hold nils. A row being prefilled is not sampled: NoToken.
func (Greedy) Pick(rows []*Seq, _ []*Request, logits []float32, vocab int, tokens []int32, errs []error) {
	for i := range rows {
		if rows[i].Prefilling() {
			tokens[i] = NoToken
			continue
		}
		row := logits[i*vocab : (i+1)*vocab]
		best, bestV := int32(-1), float32(math.Inf(-1))
		for j, v := range row {
			if v != v || v > math.MaxFloat32 {
				errs[i] = fmt.Errorf("logits of row %d (sequence %d) hold %v at token %d", i, rows[i].ID, v, j)
				best = -1
				break
			}
			if v > bestV {
				best, bestV = int32(j), v
			}
		}
		if best < 0 && errs[i] == nil {
			errs[i] = fmt.Errorf("logits of row %d (sequence %d) are all -Inf", i, rows[i].ID)
		}
		tokens[i] = best
	}
}
