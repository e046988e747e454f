package rank

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank/client"
)

// TestRank0RetainsNothingPerRequestOrEpoch: rank 0 keeps nothing of a
// finished request or of an ended epoch. Epochs end as under --on-peer-loss
// wait: a peer loss with requests in flight, held and resumed by the next
// epoch's driver. The transport, metrics, flight recorder and picker
// outlive the epochs, as in the agent. Requests are of every kind: seeded,
// greedy, with logprobs, promising keepalives, cancelled by their client.
// The live heap of an idle rank 0 must not grow with the requests it served
// in an epoch, nor with the epochs it went through.
func TestRank0RetainsNothingPerRequestOrEpoch(t *testing.T) {
	rig := newRetentionRig(t)
	rig.serve(t)
	for range 2 {
		rig.waves(t, 3)
		rig.peerLoss(t)
		rig.serve(t)
	}
	rig.waves(t, 4) // maps, rings and scratch reach their working size
	base := rig.settle(t)
	sent := rig.sent
	rig.waves(t, 32)
	moreRequests, more := rig.settle(t), rig.sent-sent
	t.Logf("live heap %d bytes after %d requests, %d after %d more in the same epoch (%+d)",
		base, sent, moreRequests, more, int64(moreRequests)-int64(base))
	epoch := rig.epoch
	for range 8 {
		rig.peerLoss(t)
		rig.serve(t)
		rig.waves(t, 3)
	}
	moreEpochs := rig.settle(t)
	t.Logf("live heap %d bytes in epoch %d, %d in epoch %d (%+d)",
		moreRequests, epoch, moreEpochs, rig.epoch, int64(moreEpochs)-int64(moreRequests))
	rig.stop(t)
	// A request kept is about 500 bytes (512 more requests), a driver kept
	// hundreds of KiB (8 more epochs). The epoch's working set (its
	// executor's logits, up to 32 KiB here, logprobs buffers, the replay
	// window) moves by up to about 60 KiB between measurements.
	const margin = 128 << 10
	if moreRequests > base+margin {
		t.Errorf("live heap grew by %d bytes over %d requests of one epoch (limit %d): something is kept per request",
			moreRequests-base, more, margin)
	}
	if moreEpochs > moreRequests+margin {
		t.Errorf("live heap grew by %d bytes over 8 epochs (limit %d): something is kept per epoch", moreEpochs-moreRequests, margin)
	}
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC() // sync.Pool's victim cache survives one
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// retentionRig is a lone rank 0 over its epochs, and what outlives them.
type retentionRig struct {
	tr      broadcast.Transport // rank 0's, kept across epochs like the agent's bus
	req     broadcast.Transport
	picker  *Sampling
	metrics *Metrics
	flight  *FlightRecorder
	epoch   uint32
	d       *Driver // the running epoch's
	stopRun context.CancelFunc
	done    chan error
	held    []*Request
	sent    int
	clients sync.WaitGroup
	mu      sync.Mutex
	errs    []error
}

const retentionWave = 16 // requests at once; also MaxBatch, so a wave is admitted at once

func newRetentionRig(t *testing.T) *retentionRig {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	hub := broadcast.NewHub()
	r := &retentionRig{tr: hub.Connect(), req: hub.Connect(), metrics: m, flight: NewFlightRecorder(0),
		picker: NewSampling(drvVocab, drvEOS, 7, nil)}
	t.Cleanup(func() {
		if r.stopRun != nil {
			r.stopRun()
			<-r.done
		}
		r.clients.Wait()
		r.tr.Close()
		r.req.Close()
	})
	return r
}

// serve runs the next epoch's driver on a new executor, resuming the held
// requests, and waits until it answers.
func (r *retentionRig) serve(t *testing.T) {
	t.Helper()
	r.epoch++
	cfg := driverConfig(0, 1)
	cfg.Epoch, cfg.MaxBatch, cfg.MaxQueue = r.epoch, retentionWave, 4*retentionWave
	cfg.HoldOnPeerLoss, cfg.Resume, cfg.Metrics, cfg.Flight = true, r.held, r.metrics, r.flight
	cfg.ReplayWindow = 32 // a ring, full from the first waves on
	r.held = nil
	ex, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	d := NewDriver(cfg, r.tr, ex, r.picker)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	r.d, r.stopRun, r.done = d, cancel, done
	waitServing(t, r.req, 1)
}

// peerLoss ends the epoch as a lost peer does, with a wave admitted and
// unfinished: its requests are held for the next epoch.
func (r *retentionRig) peerLoss(t *testing.T) {
	t.Helper()
	r.wave(false).Wait()
	r.d.Abort(fmt.Errorf("%w: the test's", ErrPeerLost))
	if err := <-r.done; !errors.Is(err, ErrPeerLost) {
		t.Fatalf("epoch %d: Run returned %v, want ErrPeerLost", r.epoch, err)
	}
	r.stopRun()
	r.stopRun = nil
	r.held = r.d.InFlight()
}

// waves runs n waves of requests, one after the other.
func (r *retentionRig) waves(t *testing.T, n int) {
	t.Helper()
	for range n {
		r.wave(true).Wait()
	}
}

// settle waits until every client has its answer, checks that none
// failed, and returns the live heap.
func (r *retentionRig) settle(t *testing.T) uint64 {
	t.Helper()
	r.clients.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) > 0 {
		t.Fatalf("%d requests failed, the first: %v", len(r.errs), r.errs[0])
	}
	return liveHeap()
}

// stop ends the running epoch cleanly.
func (r *retentionRig) stop(t *testing.T) {
	t.Helper()
	r.stopRun()
	r.stopRun = nil
	if err := <-r.done; err != nil {
		t.Fatalf("epoch %d: Run returned %v after cancel", r.epoch, err)
	}
}

// wave sends retentionWave requests at once. The WaitGroup it returns is
// done when they have finished (full), or when each has its first token
// (every one admitted; none is cancelled then, as it may be held).
func (r *retentionRig) wave(full bool) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range retentionWave {
		req, cancelAfter := retentionRequest(r.sent, full)
		r.sent++
		wg.Add(1)
		r.clients.Go(func() {
			var once sync.Once
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rep, err := client.Generate(ctx, r.req, drvSubj, req, func(index int, _ int32) {
				if index == 0 && !full {
					once.Do(wg.Done)
				}
				if index+1 == cancelAfter {
					cancel()
				}
			})
			once.Do(wg.Done)
			if err != nil && (rep == nil || rep.FinishReason != api.FinishCancelled) {
				r.mu.Lock()
				r.errs = append(r.errs, err)
				r.mu.Unlock()
			}
		})
	}
	return &wg
}

// retentionRequest is the i-th request of the mix: seeded or greedy, some
// with logprobs, some promising keepalives, and (in full waves) some
// cancelled by their client after cancelAfter tokens (0: never).
func retentionRequest(i int, full bool) (req *api.GenerateRequest, cancelAfter int) {
	req = &api.GenerateRequest{
		PromptTokenIDs: []int32{int32(2 + i%400), int32(3 + i%97), int32(5 + i%31)},
		MaxTokens:      4 + i%13,
		Keepalive:      i%5 == 0,
		Params:         api.Params{Temperature: 0.8},
	}
	if i%3 == 0 {
		req.Temperature = 0
	} else {
		seed := uint64(i)
		req.Seed = &seed
	}
	if i%4 == 0 {
		n := 3
		req.Logprobs = &n
	}
	if full && i%7 == 0 {
		cancelAfter = 2
	}
	return req, cancelAfter
}
