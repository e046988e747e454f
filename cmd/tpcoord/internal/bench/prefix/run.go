package prefix

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/job"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
	"github.com/tpcoord/tpcoord/rank/client"
)

// statusWait is how long a status query waits for every rank's answer.
const statusWait = 2 * time.Second

// Run runs o.Rounds rounds, each a job with prefix caching and one
// without (with caching first in even rounds, last in odd ones), each
// running the TTFT workload and then the chat workload, and writes one
// line per workload and job and then the summary to stdout, a table or
// JSON lines, with progress on progress.
func Run(ctx context.Context, o Options, stdout, progress io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "tpcoord-bench-prefix-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	s := Summary{Kind: "summary", Machine: stats.ThisMachine(), AVX512F: stats.HasAVX512F(), Setup: o.setup(), LoadBefore: stats.LoadAvg()}
	fmt.Fprintf(progress, "bench prefix: load average %s; %d rounds of two jobs of %d ranks\n", s.LoadBefore, o.Rounds, o.NProc)
	if !o.JSON {
		printHeader(stdout, o)
	}
	var (
		ttft []TTFTResult
		chat []ChatResult
	)
	for r := range o.Rounds {
		for _, caching := range []bool{r%2 == 0, r%2 != 0} {
			t, c, err := runJob(ctx, o, dir, r, caching, progress)
			if err != nil {
				return fmt.Errorf("round %d, caching %s: %w", r, modeName(caching), err)
			}
			ttft = append(ttft, t)
			if err := printLine(stdout, t, o.JSON); err != nil {
				return err
			}
			if o.Chats > 0 {
				chat = append(chat, c)
				if err := printLine(stdout, c, o.JSON); err != nil {
					return err
				}
			}
		}
	}
	s.LoadAfter = stats.LoadAvg()
	compare(&s, ttft, chat)
	return printSummary(stdout, s, o)
}

func (o Options) setup() Setup {
	w := o.WorkerCmd
	if w == "" {
		w = "synthetic"
	}
	s := Setup{NProc: o.NProc, Worker: w, Vocab: o.Vocab, PrefixTokens: o.PrefixTokens, SuffixTokens: o.SuffixTokens,
		Requests: o.Requests, MaxTokens: o.MaxTokens, Chats: o.Chats, Turns: o.Turns, TurnTokens: o.TurnTokens,
		AnswerTokens: o.AnswerTokens, Rounds: o.Rounds}
	if o.WorkerCmd == "" {
		s.ForwardTimeMS = ms(o.ForwardTime)
	}
	return s
}

// runJob starts round r's job with caching or without, runs both
// workloads on it and stops it.
func runJob(ctx context.Context, o Options, dir string, r int, caching bool, progress io.Writer) (TTFTResult, ChatResult, error) {
	name := fmt.Sprintf("%d-%s", r, modeName(caching))
	fmt.Fprintf(progress, "bench prefix: round %d, caching %s: starting the job\n", r, modeName(caching))
	j, err := job.Start(ctx, job.Launch{Self: o.Self, Dir: dir, Name: name, Args: o.launchArgs(r, caching)})
	if err != nil {
		return TTFTResult{}, ChatResult{}, err
	}
	t, c, err := workloads(ctx, j, o, r, caching, progress)
	if err != nil {
		return TTFTResult{}, ChatResult{}, j.Fail(err)
	}
	j.StopQuietly(progress, "bench prefix")
	return t, c, nil
}

// workloads runs the warm-up, the TTFT workload and the chat workload on
// j, reading rank 0's prefix cache counters between them.
func workloads(ctx context.Context, j *job.Job, o Options, r int, caching bool, progress io.Writer) (TTFTResult, ChatResult, error) {
	mux, err := client.NewMux(ctx, j.Bus())
	if err != nil {
		return TTFTResult{}, ChatResult{}, err
	}
	defer mux.Close()
	s := sender{mux: mux, subj: j.Subjects()}
	if err := warmUp(ctx, s, o, r); err != nil {
		return TTFTResult{}, ChatResult{}, err
	}
	kv0, _, err := kvStatus(ctx, j)
	if err != nil {
		return TTFTResult{}, ChatResult{}, err
	}
	samples, err := runTTFT(ctx, s, o, r)
	if err != nil {
		return TTFTResult{}, ChatResult{}, err
	}
	kv1, _, err := kvStatus(ctx, j)
	if err != nil {
		return TTFTResult{}, ChatResult{}, err
	}
	t := ttftResult(r, caching, samples, cacheDelta(kv0, kv1, o.Requests*(o.PrefixTokens+o.SuffixTokens)))
	fmt.Fprintf(progress, "bench prefix: round %d, caching %s: TTFT first %.1f ms, rest p50 %.1f ms\n", r, t.Caching, t.FirstMS, t.RestP50)
	if o.Chats == 0 {
		return t, ChatResult{}, nil
	}
	cs, err := runChat(ctx, s, o, r)
	if err != nil {
		return TTFTResult{}, ChatResult{}, err
	}
	kv2, maxStep, err := kvStatus(ctx, j)
	if err != nil {
		return TTFTResult{}, ChatResult{}, err
	}
	c := chatResult(r, caching, cs, cacheDelta(kv1, kv2, cs.promptTokens), maxStep)
	fmt.Fprintf(progress, "bench prefix: round %d, caching %s: chat prefill %d of %d tokens, TTFT p50 %.1f ms\n", r, c.Caching, c.Computed, c.PromptTokens, c.TTFTP50)
	return t, c, nil
}

// kvStatus is rank 0's KV cache counters and its most tokens in a step.
func kvStatus(ctx context.Context, j *job.Job) (api.KVStatus, int, error) {
	ranks, err := client.CollectStatus(ctx, j.Bus(), j.Subjects(), statusWait)
	if err != nil {
		return api.KVStatus{}, 0, fmt.Errorf("status: %w", err)
	}
	for _, st := range ranks {
		if st.Rank == 0 && st.KV != nil {
			return *st.KV, st.MaxStepTokens, nil
		}
	}
	return api.KVStatus{}, 0, errors.New("status: rank 0 did not answer, or schedules no KV cache")
}
