package rank

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank/client"
)

// TestDriverResumeSameTokens: a request submitted again with the first k
// tokens of its output (resume_token_ids), as a client does after a fault,
// streams the rest from index k, and its whole output equals the
// undisturbed run's: the noise is a function of the seed and the
// position, not of the rank 0 or the batch. Seeded and greedy requests,
// every k.
func TestDriverResumeSameTokens(t *testing.T) {
	c, _ := kvJob(t, nil, nil)
	stopped := 0
	for i := range 8 {
		full, err := client.Generate(context.Background(), c.requester, drvSubj, kvRequest(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		for k := 1; k < len(full.Tokens); k++ {
			req := kvRequest(i)
			req.ResumeTokenIDs = full.Tokens[:k]
			var streamed []int32
			first := -1
			rep, err := client.Generate(context.Background(), c.requester, drvSubj, req, func(index int, tok int32) {
				if first < 0 {
					first = index
				}
				streamed = append(streamed, tok)
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rep.Tokens, full.Tokens) || first != k || !slices.Equal(streamed, full.Tokens[k:]) {
				t.Fatalf("request %d resumed after %d tokens: final %v, streamed %v from index %d; undisturbed %v", i, k, rep.Tokens, streamed, first, full.Tokens)
			}
		}
		if full.FinishReason != api.FinishStop {
			continue
		}
		stopped++
		// Resubmitted with all its tokens, the last a stop (its final
		// reply lost): it ends at once as it did, generating nothing.
		req := kvRequest(i)
		req.ResumeTokenIDs = full.Tokens
		rep, err := client.Generate(context.Background(), c.requester, drvSubj, req, func(int, int32) { t.Errorf("request %d: a token after its stop", i) })
		if err != nil || rep.FinishReason != api.FinishStop || !slices.Equal(rep.Tokens, full.Tokens) {
			t.Fatalf("request %d resumed after its stop: %+v %v", i, rep, err)
		}
	}
	if stopped == 0 {
		t.Fatal("no request stopped at EOS: the resubmission after a stop is not exercised")
	}
}

// TestDriverSupersedes: a request submitted again with the ID of one still
// running replaces it: the first ends cancelled, superseded, and only the
// second runs to the end.
func TestDriverSupersedes(t *testing.T) {
	c, _ := kvJob(t, nil, nil)
	req := kvRequest(0)
	req.MaxTokens, req.IgnoreEOS, req.RequestID = 100000, true, "job-7/req-1"
	firstTok := make(chan struct{})
	type result struct {
		rep *api.GenerateReply
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		once := false
		rep, err := client.Generate(ctx, c.requester, drvSubj, req, func(int, int32) {
			if !once {
				once = true
				close(firstTok)
			}
		})
		done <- result{rep, err}
	}()
	<-firstTok
	again := *req
	again.MaxTokens = 8
	rep, err := client.Generate(context.Background(), c.requester, drvSubj, &again, nil)
	if err != nil || len(rep.Tokens) != 8 {
		t.Fatalf("the resubmission: %+v, %v", rep, err)
	}
	select {
	case r := <-done:
		if r.err == nil || r.rep == nil || r.rep.FinishReason != api.FinishCancelled || !strings.Contains(r.rep.Error, "superseded") {
			t.Fatalf("the first submission: %+v, %v", r.rep, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first submission still runs beside its resubmission")
	}
	bad := *req
	bad.RequestID = "has space"
	if _, err := client.Generate(context.Background(), c.requester, drvSubj, &bad, nil); err == nil || !strings.Contains(err.Error(), "request_id") {
		t.Fatalf("a bad request_id: %v", err)
	}
}
