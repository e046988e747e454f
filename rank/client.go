package rank

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/sampler"
)

// Generate submits req to rank 0 and calls onToken for each streamed token
// (it may be nil). It returns the final reply; a reply carrying an error is
// returned as an error too. While waiting it sends keepalives, so rank 0
// drops the request if this client goes away; if ctx ends first it asks
// rank 0 to cancel the request and returns the cancelled reply (or ctx's
// error if none comes within a few seconds).
func Generate(ctx context.Context, tr broadcast.Transport, subj broadcast.Subjects, req *GenerateRequest, onToken func(index int, token int32)) (*GenerateReply, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	inbox := tr.NewInbox()
	replies := make(chan []byte, 1024)
	overflow := make(chan struct{})
	noResponders := make(chan struct{}, 1)
	unsub, err := tr.Subscribe(inbox, func(m *broadcast.Msg) {
		if broadcast.IsNoResponders(m) {
			select {
			case noResponders <- struct{}{}:
			default:
			}
			return
		}
		select {
		case replies <- append([]byte(nil), m.Data...):
		default:
			select {
			case <-overflow:
			default:
				close(overflow)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = unsub() }()
	if err := tr.Flush(ctx); err != nil {
		return nil, fmt.Errorf("subscribe reply inbox: %w", err)
	}
	if err := tr.Publish(&broadcast.Msg{Subject: subj.Generate(), Reply: inbox, Data: data}); err != nil {
		return nil, fmt.Errorf("submit request: %w", err)
	}
	send := func(op string) error {
		b, _ := json.Marshal(ClientMessage{Reply: inbox, Op: op})
		return tr.Publish(&broadcast.Msg{Subject: subj.Client(), Data: b})
	}
	keepalive := time.NewTicker(KeepaliveInterval)
	defer keepalive.Stop()
	var cancelled <-chan time.Time // set once a cancel was sent
	var logprobs []sampler.Logprobs
	done := ctx.Done()
	for {
		select {
		case <-done:
			_ = send("cancel")
			_ = tr.Flush(context.Background())
			done = nil
			t := time.NewTimer(3 * time.Second)
			defer t.Stop()
			cancelled = t.C
		case <-cancelled:
			return nil, fmt.Errorf("waiting for tokens: %w", ctx.Err())
		case <-keepalive.C:
			// A connection closed for good (the server gone, reconnects
			// exhausted) would otherwise leave us waiting for a reply that
			// cannot come until ctx ends.
			if err := send("keepalive"); errors.Is(err, broadcast.ErrClosed) {
				return nil, fmt.Errorf("waiting for tokens: connection to NATS lost: %w", err)
			}
		case <-overflow:
			return nil, fmt.Errorf("reply stream overflowed: this client fell behind")
		case <-noResponders:
			return nil, fmt.Errorf("no rank 0 serves job %q on %s (%w)", subj.Job, subj.Generate(), broadcast.ErrNoResponders)
		case b := <-replies:
			var r GenerateReply
			if err := json.Unmarshal(b, &r); err != nil {
				return nil, fmt.Errorf("malformed reply from rank 0: %w", err)
			}
			if r.Token != nil && onToken != nil {
				onToken(r.Index, *r.Token)
			}
			if r.Logprobs != nil {
				if r.Index < 0 || r.Index > req.MaxTokens {
					return nil, fmt.Errorf("malformed reply from rank 0: logprobs for token %d of at most %d", r.Index, req.MaxTokens)
				}
				for len(logprobs) <= r.Index {
					logprobs = append(logprobs, sampler.Logprobs{Token: -1})
				}
				logprobs[r.Index] = *r.Logprobs
			}
			if !r.Done {
				continue
			}
			r.TokenLogprobs = logprobs
			if r.Error != "" {
				return &r, fmt.Errorf("rank 0: %s", r.Error)
			}
			return &r, nil
		}
	}
}

// CollectStatus asks every rank for its status and gathers the replies
// until world-size ranks have answered (the world size comes from the
// replies) or wait has passed. Ranks are sorted by rank.
func CollectStatus(ctx context.Context, tr broadcast.Transport, subj broadcast.Subjects, wait time.Duration) ([]RankStatus, error) {
	inbox := tr.NewInbox()
	replies := make(chan []byte, 256)
	unsub, err := tr.Subscribe(inbox, func(m *broadcast.Msg) {
		select {
		case replies <- append([]byte(nil), m.Data...):
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = unsub() }()
	if err := tr.Flush(ctx); err != nil {
		return nil, err
	}
	if err := tr.Publish(&broadcast.Msg{Subject: subj.Status(), Reply: inbox}); err != nil {
		return nil, err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	seen := map[int]RankStatus{}
	world := -1
	for world < 0 || len(seen) < world {
		select {
		case <-ctx.Done():
			return sorted(seen), ctx.Err()
		case <-timer.C:
			return sorted(seen), nil
		case b := <-replies:
			var st RankStatus
			if err := json.Unmarshal(b, &st); err != nil {
				continue
			}
			seen[st.Rank] = st
			world = max(world, st.World)
		}
	}
	return sorted(seen), nil
}

func sorted(m map[int]RankStatus) []RankStatus {
	out := make([]RankStatus, 0, len(m))
	for _, s := range m {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out
}
