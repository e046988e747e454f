package sampler

import (
	"fmt"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// ModeParams returns the parameters of a named benchmark mode: plain
// (T = 0.8), topk (k = 50), topp (p = 0.9), topk_topp (k = 50, p = 0.9),
// minp (min_p = 0.05), greedy. The sampler's targets (docs/benchmarks.md)
// are set for plain, topk and topp.
func ModeParams(mode string) (api.Params, error) {
	p := api.DefaultParams()
	p.Temperature = 0.8
	switch mode {
	case "plain":
	case "topk":
		p.TopK = 50
	case "topp":
		p.TopP = 0.9
	case "topk_topp":
		p.TopK, p.TopP = 50, 0.9
	case "minp":
		p.MinP = 0.05
	case "greedy":
		p.Temperature = 0
	default:
		return api.Params{}, fmt.Errorf("unknown mode %q (want plain, topk, topp, topk_topp, minp or greedy)", mode)
	}
	return p, nil
}
