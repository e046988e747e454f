package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/internal/poll"
	"github.com/tpcoord/tpcoord/rank/client"
)

func connect(t *testing.T, j *job) (*natsbus.Conn, broadcast.Subjects) {
	t.Helper()
	nc, err := natsbus.Connect(natsbus.Config{URL: j.info.NATSURL, Name: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, broadcast.Subjects{Prefix: "tpc", Job: j.info.Job}
}

// TestManyMixedRequests: 200 concurrent requests with mixed sampling
// parameters all complete, each with a finish reason its tokens justify.
func TestManyMixedRequests(t *testing.T) {
	const eos = 0
	j := launch(t, "--nproc", "2", "--job", "e2e-many", "--forward-time", "2ms", "--max-batch", "64", "--vocab", "32000")
	nc, subj := connect(t, j)
	rng := rand.New(rand.NewPCG(7, 7))
	reqs := make([]*api.GenerateRequest, 200)
	for i := range reqs {
		p := api.DefaultParams()
		switch i % 6 {
		case 0:
			p.Temperature = 0
		case 1:
			p.Temperature, p.TopK = 0.7, 20
		case 2:
			p.Temperature, p.TopP = 1.1, 0.8
		case 3:
			p.Temperature, p.MinP, p.RepetitionPenalty, p.PresencePenalty = 0.9, 0.05, 1.2, 0.5
		case 4:
			p.Temperature, p.FrequencyPenalty, p.LogitBias = 0.8, 0.3, map[int32]float32{int32(rng.IntN(32000)): 3}
		case 5:
			p.Temperature, p.MinTokens, p.StopTokenIDs = 1, 5, []int32{int32(rng.IntN(32000))}
		}
		if i%3 == 0 {
			seed := uint64(i)
			p.Seed = &seed
		}
		reqs[i] = &api.GenerateRequest{
			PromptTokenIDs: []int32{int32(rng.IntN(32000)), int32(rng.IntN(32000))},
			MaxTokens:      4 + rng.IntN(40),
			Params:         p,
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(reqs))
	for i, req := range reqs {
		wg.Go(func() {
			rep, err := client.Generate(ctx, nc, subj, req, nil)
			if err != nil {
				errs[i] = fmt.Errorf("request %d: %w", i, err)
				return
			}
			n := len(rep.Tokens)
			switch rep.FinishReason {
			case api.FinishLength:
				if n != req.MaxTokens {
					errs[i] = fmt.Errorf("request %d: length with %d tokens, max %d", i, n, req.MaxTokens)
				}
			case api.FinishStop:
				last := rep.Tokens[n-1]
				if n < req.MinTokens || (last != eos && !slices.Contains(req.StopTokenIDs, last)) {
					errs[i] = fmt.Errorf("request %d: stop on token %d after %d tokens (min %d, stop ids %v)", i, last, n, req.MinTokens, req.StopTokenIDs)
				}
			default:
				errs[i] = fmt.Errorf("request %d: finish reason %q", i, rep.FinishReason)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestCancelMidStream: SIGINT to `tpcoord generate` cancels its request at
// rank 0: the client reports finish_reason cancelled and the batch empties.
func TestCancelMidStream(t *testing.T) {
	j := launch(t, "--nproc", "2", "--job", "e2e-cancel", "--forward-time", "5ms")
	cmd := exec.Command(tpcoordBin, "generate", "--nats", j.info.NATSURL, "--job", j.info.Job, "--json",
		"--prompt", "1,2,3", "--max-tokens", "100000", "--ignore-eos")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	poll.UntilDetail(t, 60*time.Second, "the request decoding", func() (bool, string) {
		ranks, err := j.status()
		return err == nil && len(ranks) == 2 && ranks[0].Step > 10, fmt.Sprintf("%+v %v", ranks, err)
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	var got generated
	line := strings.SplitN(strings.TrimSpace(out.String()), "\n", 2)[0]
	if err := json.Unmarshal([]byte(line), &got); err != nil || got.FinishReason != "cancelled" || len(got.Tokens) == 0 {
		t.Fatalf("generate after SIGINT printed %q", out.String())
	}
	poll.UntilDetail(t, 30*time.Second, "the batch empty and ranks in lockstep", func() (bool, string) {
		nc, subj := connect(t, j)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := client.CollectStatus(ctx, nc, subj, time.Second)
		return err == nil && len(st) == 2 && st[0].Rows == 0 && st[0].Step == st[1].Step && st[0].Digest == st[1].Digest, fmt.Sprintf("%+v %v", st, err)
	})
}

// TestOverload: with a small queue, a burst of requests gets "overloaded"
// errors for the excess while the rest complete.
func TestOverload(t *testing.T) {
	j := launch(t, "--nproc", "2", "--job", "e2e-overload", "--forward-time", "20ms", "--max-batch", "1", "--max-queue", "2")
	nc, subj := connect(t, j)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var ok, overloaded int
	var other []error
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			p := api.DefaultParams()
			p.Temperature, p.IgnoreEOS = 0, true
			_, err := client.Generate(ctx, nc, subj, &api.GenerateRequest{PromptTokenIDs: []int32{int32(i + 1)}, MaxTokens: 10, Params: p}, nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case strings.Contains(err.Error(), "overloaded"):
				overloaded++
			default:
				other = append(other, err)
			}
		})
	}
	wg.Wait()
	if len(other) > 0 || ok == 0 || overloaded == 0 {
		t.Fatalf("%d completed, %d overloaded, other errors %v; want both kinds and nothing else", ok, overloaded, other)
	}
	t.Logf("%d completed, %d refused as overloaded", ok, overloaded)
}
