package rank

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/poll"
	"github.com/tpcoord/tpcoord/rank/client"
)

// TestStepTraceJoinsRanks: with tracing on, a follower's step span is a
// child of rank 0's step span (same trace, parent = rank 0's step), carried
// by the traceparent header of the step message; each rank's step span has
// its phase children.
func TestStepTraceJoinsRanks(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	ctx, cancel := context.WithCancel(context.Background())
	hub := broadcast.NewHub()
	var ranks []*runningRank
	for r := range 2 {
		cfg := driverConfig(r, 2)
		cfg.Tracer, cfg.TraceEvery, cfg.Leader = tp.Tracer("tpcoord"), 2, 0x51
		ranks = append(ranks, startRank(t, ctx, hub, cfg))
	}
	t.Cleanup(func() {
		cancel()
		for _, r := range ranks {
			_ = r.wait(t)
		}
	})
	requester := hub.Connect()
	t.Cleanup(requester.Close)
	// Rank 0 takes requests once it has subscribed (it is then ready).
	poll.Until(t, 10*time.Second, "ranks never became ready", func() bool {
		return ranks[0].d.Status().State != "joining" && ranks[1].d.Status().State != "joining"
	})
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	if _, err := client.Generate(rctx, requester, drvSubj, &api.GenerateRequest{PromptTokenIDs: []int32{3, 4}, MaxTokens: 6}, nil); err != nil {
		t.Fatal(err)
	}
	// Rank 1 reports a step after its spans have ended.
	poll.Until(t, 10*time.Second, "follower did not catch up", func() bool {
		return ranks[1].d.Status().Step == ranks[0].d.Status().Step
	})

	checkStepSpans(t, rec.Ended())
}

// checkStepSpans checks the recorded spans hold step spans of rank 0 and
// of a follower, every follower step span a child of a rank 0 step span in
// the same trace, and each step span with its phases as children.
func checkStepSpans(t *testing.T, spans []sdktrace.ReadOnlySpan) {
	t.Helper()
	byID := map[string]sdktrace.ReadOnlySpan{}
	var leaderSteps, followerSteps []sdktrace.ReadOnlySpan
	for _, s := range spans {
		byID[s.SpanContext().SpanID().String()] = s
		if s.Name() != "step" {
			continue
		}
		for _, a := range s.Attributes() {
			if a.Key == "tpc.rank" && a.Value.AsInt64() == 0 {
				leaderSteps = append(leaderSteps, s)
			} else if a.Key == "tpc.rank" {
				followerSteps = append(followerSteps, s)
			}
		}
	}
	if len(leaderSteps) == 0 || len(followerSteps) == 0 {
		t.Fatalf("recorded %d rank-0 and %d follower step spans, want both", len(leaderSteps), len(followerSteps))
	}
	for _, f := range followerSteps {
		parent, ok := byID[f.Parent().SpanID().String()]
		if !ok || parent.Name() != "step" || f.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("follower step span's parent is %v, want rank 0's step span in the same trace", f.Parent())
		}
	}
	children := stepChildren(spans, byID)
	for _, s := range leaderSteps {
		c := children[s.SpanContext().SpanID().String()]
		if !c["publish"] || !c["forward"] || !c["sample"] {
			t.Errorf("rank 0 step span children %v, want publish, forward, sample", c)
		}
	}
	for _, s := range followerSteps {
		c := children[s.SpanContext().SpanID().String()]
		if !c["await_step"] || !c["forward"] {
			t.Errorf("follower step span children %v, want await_step, forward", c)
		}
	}
}

// stepChildren maps each step span's ID to the names of its children.
func stepChildren(spans []sdktrace.ReadOnlySpan, byID map[string]sdktrace.ReadOnlySpan) map[string]map[string]bool {
	children := map[string]map[string]bool{}
	for _, s := range spans {
		if p, ok := byID[s.Parent().SpanID().String()]; ok && p.Name() == "step" {
			id := p.SpanContext().SpanID().String()
			if children[id] == nil {
				children[id] = map[string]bool{}
			}
			children[id][s.Name()] = true
		}
	}
	return children
}

// TestFollowerRefusesOtherLeader: a step stamped by another rank 0 process
// (a stale one of an earlier run) is refused and counted, never applied.
func TestFollowerRefusesOtherLeader(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	hub := broadcast.NewHub()
	cfg := driverConfig(1, 2)
	cfg.Leader = 0x51
	r := startRank(t, ctx, hub, cfg)
	pub := hub.Connect()
	t.Cleanup(func() { cancel(); _ = r.wait(t); pub.Close() })
	poll.Until(t, 10*time.Second, "follower never became ready", func() bool { return r.d.Status().State == "ready" })

	publishStep(t, pub, &broadcast.Step{Epoch: 1, Leader: 0x52, Step: 1, Admitted: []broadcast.Admission{{Seq: 1, Prompt: []int32{4}}}})
	publishStep(t, pub, &broadcast.Step{Epoch: 1, Leader: 0x51, Step: 1})
	poll.Until(t, 10*time.Second, "the real leader's step was not applied", func() bool { return r.d.Status().Step == 1 })
	st := r.d.Status()
	if st.Rows != 0 || st.Rejected["sender"] != 1 {
		t.Fatalf("status %+v: want the other leader's step refused (sender 1) and no rows", st)
	}
}
