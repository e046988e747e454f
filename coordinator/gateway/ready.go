package gateway

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

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
			g.vocab.note(sts[i].Vocab)
			return &sts[i], nil
		}
	}
	return nil, fmt.Errorf("rank 0 of job %q did not answer within %v", g.subj.Job, g.cfg.StatusWait)
}

// CheckVocab returns why tok cannot serve a model of vocab tokens (it has
// more: ids the model does not have), or nil. /ready, every completion
// and chat request, and launch before it starts a job give this reason.
func CheckVocab(tok Tokenizer, vocab int) error {
	if tok == nil || vocab <= 0 || tok.VocabSize() <= vocab {
		return nil
	}
	return fmt.Errorf("the tokenizer %s has %d tokens, more than the job's vocabulary of %d", tok.Name(), tok.VocabSize(), vocab)
}

// jobVocab is the job's vocabulary size as rank 0's status gave it: known
// once seen (a job's model does not change under a gateway).
type jobVocab struct {
	known atomic.Int64 // 0: not yet known

	mu     sync.Mutex // one ask at a time
	failed time.Time  // the last ask that got no answer
}

func (v *jobVocab) note(n int) {
	if n > 0 {
		v.known.Store(int64(n))
	}
}

// vocabRefusal is the answer to a completion or chat request when the
// tokenizer does not fit the job's vocabulary (nil when it fits, or the
// vocabulary is not known). Until some status has told it, rank 0 is
// asked (one ask at a time, the others wait for it); a job that does not
// answer is asked again at most once a second, and meanwhile requests go
// on unchecked (they fail for want of rank 0 anyway).
func (g *Gateway) vocabRefusal(ctx context.Context) *apiError {
	if g.tok == nil {
		return nil
	}
	n := int(g.vocab.known.Load())
	if n == 0 {
		n = g.askVocab(ctx)
	}
	if err := CheckVocab(g.tok, n); err != nil {
		return &apiError{Status: http.StatusServiceUnavailable, Type: "service_unavailable", Code: "tokenizer_mismatch",
			Message: err.Error() + " (/ready says the same): the gateway's --tokenizer is not the job's model's"}
	}
	return nil
}

func (g *Gateway) askVocab(ctx context.Context) int {
	v := &g.vocab
	v.mu.Lock()
	defer v.mu.Unlock()
	if n := v.known.Load(); n > 0 || time.Since(v.failed) < time.Second {
		return int(n)
	}
	if _, err := g.rank0Status(ctx); err != nil || v.known.Load() == 0 {
		v.failed = time.Now()
	}
	return int(v.known.Load())
}

// handleReady answers 200 once the job has formed and rank 0 answers: rank
// 0 runs its decode loop (state ready when idle, running when decoding).
func (g *Gateway) handleReady(w http.ResponseWriter, r *http.Request) {
	st, err := g.rank0Status(r.Context())
	if err == nil {
		err = CheckVocab(g.tok, st.Vocab)
	}
	switch {
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": err.Error()})
	case st.State != "ready" && st.State != "running":
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable",
			"reason": fmt.Sprintf("rank 0 is %s (epoch %d), not serving", st.State, st.Epoch)})
	default:
		writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "epoch": st.Epoch, "world_size": st.World, "step": st.Step})
	}
}
