package gateway

import (
	"context"
	"fmt"
	"net/http"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank/client"
)

// rank0Status asks the job for its ranks' status and returns rank 0's.
func (g *Gateway) rank0Status(ctx context.Context) (*api.RankStatus, error) {
	sts, err := client.CollectStatus(ctx, g.bus, g.subj, g.cfg.StatusWait)
	if err != nil && len(sts) == 0 {
		return nil, err
	}
	for i := range sts {
		if sts[i].Rank == 0 {
			return &sts[i], nil
		}
	}
	return nil, fmt.Errorf("rank 0 of job %q did not answer within %v", g.subj.Job, g.cfg.StatusWait)
}

// handleReady answers 200 once the job has formed and rank 0 answers: rank
// 0 runs its decode loop (state ready when idle, running when decoding).
func (g *Gateway) handleReady(w http.ResponseWriter, r *http.Request) {
	st, err := g.rank0Status(r.Context())
	switch {
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": err.Error()})
	case st.State != "ready" && st.State != "running":
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable",
			"reason": fmt.Sprintf("rank 0 is %s (epoch %d), not serving", st.State, st.Epoch)})
	case g.tok != nil && st.Vocab > 0 && g.tok.VocabSize() > st.Vocab:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable",
			"reason": fmt.Sprintf("the tokenizer %s has %d tokens, more than the job's vocabulary of %d", g.tok.Name(), g.tok.VocabSize(), st.Vocab)})
	default:
		writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "epoch": st.Epoch, "world_size": st.World, "step": st.Step})
	}
}
