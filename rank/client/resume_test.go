package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// script is a fake attempt: each call plays the next step's token and
// logprob replies, then returns its result; it records what each
// submission asked to resume from.
type script struct {
	steps   []scriptStep
	resumes [][]int32
	ids     []string
}

type scriptStep struct {
	replies []reply // in order
	rep     *api.GenerateReply
	err     error
}

type reply struct {
	index   int
	tok     int32
	logprob bool // a logprobs reply for index, not a token
}

func (s *script) attempt(req *api.GenerateRequest, cb Callbacks) (*api.GenerateReply, error) {
	s.resumes = append(s.resumes, slices.Clone(req.ResumeTokenIDs))
	s.ids = append(s.ids, req.RequestID)
	st := s.steps[len(s.resumes)-1]
	for _, r := range st.replies {
		if r.logprob {
			cb.Logprobs(r.index, &api.Logprobs{Token: int32(100 + r.index)})
		} else {
			cb.Token(r.index, r.tok)
		}
	}
	return st.rep, st.err
}

type seen struct {
	tokens   []int32
	indices  []int
	logprobs []int
}

func (v *seen) callbacks() Callbacks {
	return Callbacks{
		Token: func(i int, tok int32) { v.indices, v.tokens = append(v.indices, i), append(v.tokens, tok) },
		Logprobs: func(i int, lp *api.Logprobs) {
			if lp.Token != int32(100+i) {
				panic("a logprob passed on for the wrong index")
			}
			v.logprobs = append(v.logprobs, i)
		},
	}
}

// TestResumableFillsGaps: a token lost before a fault (index 2) and a
// resubmission that sends tokens again: the callbacks get each index
// once, in order; the resubmission carries the ID and the tokens without
// a gap; the final reply holds the whole output.
func TestResumableFillsGaps(t *testing.T) {
	s := &script{steps: []scriptStep{
		{replies: []reply{{index: 0, tok: 10}, {index: 1, tok: 11}, {index: 3, tok: 13}}, err: ErrRequestLost},
		{replies: []reply{{index: 2, tok: 12}, {index: 3, tok: 13}, {index: 4, tok: 14}},
			rep: &api.GenerateReply{Done: true, FinishReason: api.FinishLength, Tokens: []int32{10, 11, 12, 13, 14}}},
	}}
	var v seen
	rep, err := resumable(context.Background(), &api.GenerateRequest{MaxTokens: 5}, v.callbacks(), s.attempt)
	if err != nil || !slices.Equal(rep.Tokens, []int32{10, 11, 12, 13, 14}) {
		t.Fatalf("%+v %v", rep, err)
	}
	if !slices.Equal(v.tokens, []int32{10, 11, 12, 13, 14}) || !slices.Equal(v.indices, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("callbacks saw %v at %v", v.tokens, v.indices)
	}
	if !slices.Equal(s.resumes[1], []int32{10, 11}) || s.ids[0] == "" || s.ids[0] != s.ids[1] {
		t.Fatalf("resubmitted from %v with IDs %q", s.resumes, s.ids)
	}
}

// TestResumableLogprobs: a fault after tokens whose logprobs had not yet
// come: the resubmission starts before them, so they come again with their
// logprobs, and every index's logprobs are passed on once, in order.
func TestResumableLogprobs(t *testing.T) {
	n := 1
	s := &script{steps: []scriptStep{
		{replies: []reply{{index: 0, tok: 10}, {index: 0, logprob: true}, {index: 1, tok: 11}, {index: 2, tok: 12}, {index: 1, logprob: true}}, err: ErrRequestLost},
		{replies: []reply{{index: 2, tok: 12}, {index: 2, logprob: true}, {index: 3, tok: 13}, {index: 3, logprob: true}},
			rep: &api.GenerateReply{Done: true, FinishReason: api.FinishLength, Tokens: []int32{10, 11, 12, 13}}},
	}}
	var v seen
	rep, err := resumable(context.Background(), &api.GenerateRequest{MaxTokens: 4, Params: api.Params{Logprobs: &n}}, v.callbacks(), s.attempt)
	if err != nil || len(rep.TokenLogprobs) != 4 {
		t.Fatalf("%+v %v", rep, err)
	}
	if !slices.Equal(v.logprobs, []int{0, 1, 2, 3}) || !slices.Equal(v.indices, []int{0, 1, 2, 3}) {
		t.Fatalf("logprobs passed on for %v, tokens %v", v.logprobs, v.indices)
	}
	if !slices.Equal(s.resumes[1], []int32{10, 11}) {
		t.Fatalf("resubmitted from %v, want the tokens whose logprobs came", s.resumes[1])
	}
}

// TestResumableRefillsLogprobs: a seeded request that finished with a
// logprobs reply lost (a NATS restart) is submitted again from the token
// whose logprobs did not come; its tokens are passed on once, its
// logprobs all, in order. Unseeded and sampled, it is not (other tokens
// would come).
func TestResumableRefillsLogprobs(t *testing.T) {
	n, seed := 1, uint64(5)
	done := &api.GenerateReply{Done: true, FinishReason: api.FinishLength, Tokens: []int32{10, 11, 12, 13}}
	lost := scriptStep{replies: []reply{{index: 0, tok: 10}, {index: 0, logprob: true}, {index: 1, tok: 11}, {index: 2, tok: 12}, {index: 2, logprob: true}, {index: 3, tok: 13}, {index: 3, logprob: true}}, rep: done}
	again := scriptStep{replies: []reply{{index: 1, tok: 11}, {index: 1, logprob: true}, {index: 2, tok: 12}, {index: 2, logprob: true}, {index: 3, tok: 13}, {index: 3, logprob: true}}, rep: done}
	s := &script{steps: []scriptStep{lost, again}}
	var v seen
	req := api.GenerateRequest{MaxTokens: 4, Params: api.Params{Logprobs: &n, Seed: &seed, Temperature: 1}}
	rep, err := resumable(context.Background(), &req, v.callbacks(), s.attempt)
	if err != nil || len(rep.TokenLogprobs) != 4 || !slices.Equal(rep.Tokens, done.Tokens) {
		t.Fatalf("%+v %v", rep, err)
	}
	if !slices.Equal(v.logprobs, []int{0, 1, 2, 3}) || !slices.Equal(v.indices, []int{0, 1, 2, 3}) || !slices.Equal(s.resumes[1], []int32{10}) {
		t.Fatalf("logprobs passed on for %v, tokens %v, resubmitted from %v", v.logprobs, v.indices, s.resumes[1])
	}
	// A refill that fails leaves the answer as it was, without them.
	s = &script{steps: []scriptStep{lost, {err: errors.New("overloaded: queue full")}}}
	rep, err = resumable(context.Background(), &req, Callbacks{}, s.attempt)
	if err != nil || !slices.Equal(rep.Tokens, done.Tokens) || rep.FinishReason != api.FinishLength {
		t.Fatalf("a failed refill: %+v %v, want the first answer", rep, err)
	}
	s = &script{steps: []scriptStep{lost}}
	req.Seed = nil
	if _, err := resumable(context.Background(), &req, Callbacks{}, s.attempt); err != nil || len(s.resumes) != 1 {
		t.Fatalf("unseeded: %v after %d submissions, want 1", err, len(s.resumes))
	}
}

// TestResumableGivesUp: an error that cannot pass is returned at once, as
// is any with the window at 0; held tokens past a gap are dropped at a
// resubmission (an unseeded request's new tokens differ).
func TestResumableGivesUp(t *testing.T) {
	bad := errors.New("rank 0: invalid")
	s := &script{steps: []scriptStep{{err: bad}}}
	if _, err := resumable(context.Background(), &api.GenerateRequest{MaxTokens: 3}, Callbacks{}, s.attempt); !errors.Is(err, bad) || len(s.resumes) != 1 {
		t.Fatalf("%v after %d submissions", err, len(s.resumes))
	}
	// A submission whose inbox could not be subscribed (NATS down) is made
	// again.
	s = &script{steps: []scriptStep{{err: fmt.Errorf("%w: subscribe reply inbox: connection closed", errNotSubmitted)},
		{rep: &api.GenerateReply{Done: true, FinishReason: api.FinishLength, Tokens: []int32{}}}}}
	if _, err := resumable(context.Background(), &api.GenerateRequest{MaxTokens: 3}, Callbacks{}, s.attempt); err != nil || len(s.resumes) != 2 {
		t.Fatalf("not submitted: %v after %d submissions", err, len(s.resumes))
	}
	s = &script{steps: []scriptStep{{err: ErrRequestLost}}}
	if _, err := resumable(WithResumeWindow(context.Background(), 0), &api.GenerateRequest{MaxTokens: 3}, Callbacks{}, s.attempt); !errors.Is(err, ErrRequestLost) || len(s.resumes) != 1 {
		t.Fatalf("window 0: %v after %d submissions", err, len(s.resumes))
	}
	s = &script{steps: []scriptStep{
		{replies: []reply{{index: 0, tok: 10}, {index: 2, tok: 99}}, err: ErrRequestLost},
		{replies: []reply{{index: 1, tok: 21}, {index: 2, tok: 22}}, rep: &api.GenerateReply{Done: true, FinishReason: api.FinishLength, Tokens: []int32{10, 21, 22}}},
	}}
	var v seen
	rep, err := resumable(context.Background(), &api.GenerateRequest{MaxTokens: 3}, v.callbacks(), s.attempt)
	if err != nil || !slices.Equal(v.tokens, []int32{10, 21, 22}) || !slices.Equal(rep.Tokens, []int32{10, 21, 22}) {
		t.Fatalf("held token kept across a resubmission: saw %v, final %+v %v", v.tokens, rep, err)
	}
}
