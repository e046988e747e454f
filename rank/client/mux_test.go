package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
)

// TestMuxRoutesEachRequestsReplies: concurrent requests through one Mux
// each get their own tokens and final reply, keepalive answers reach
// their request, and a finished request's routes are gone.
func TestMuxRoutesEachRequestsReplies(t *testing.T) {
	hub := broadcast.NewHub()
	subj := broadcast.Subjects{Prefix: "tpc", Job: "mux"}
	rank0, requester := hub.Connect(), hub.Connect()
	t.Cleanup(func() { rank0.Close(); requester.Close() })
	// A stand-in for rank 0: request p (its prompt's token) streams p, p+1,
	// p+2 and ends.
	if _, err := rank0.Subscribe(subj.Generate(), func(m *broadcast.Msg) {
		var r api.GenerateRequest
		_ = json.Unmarshal(m.Data, &r)
		p := r.PromptTokenIDs[0]
		for i := range int32(3) {
			tok := p + i
			data, _ := json.Marshal(api.GenerateReply{Token: &tok, Index: int(i)})
			_ = rank0.Publish(&broadcast.Msg{Subject: m.Reply, Data: data})
		}
		data, _ := json.Marshal(api.GenerateReply{Done: true, FinishReason: api.FinishLength, Tokens: []int32{p, p + 1, p + 2}})
		_ = rank0.Publish(&broadcast.Msg{Subject: m.Reply, Data: data})
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := NewMux(ctx, requester)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for p := range int32(16) {
		wg.Go(func() {
			var got []int32
			rep, err := m.Stream(ctx, subj, &api.GenerateRequest{PromptTokenIDs: []int32{100 * p}, MaxTokens: 3},
				Callbacks{Token: func(_ int, tok int32) { got = append(got, tok) }})
			if err == nil && (fmt.Sprint(got) != fmt.Sprint(rep.Tokens) || rep.Tokens[0] != 100*p) {
				err = fmt.Errorf("request %d: streamed %v, final %v", p, got, rep.Tokens)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	m.mu.Lock()
	left := len(m.routes)
	m.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d routes left after every request ended", left)
	}
}

// With no rank 0 subscribed, a request through a Mux hears "no
// responders" on its own subject and says so.
func TestMuxNoResponders(t *testing.T) {
	hub := broadcast.NewHub()
	requester := hub.Connect()
	t.Cleanup(func() { requester.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := NewMux(ctx, requester)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	_, err = m.Stream(ctx, broadcast.Subjects{Prefix: "tpc", Job: "none"}, &api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 1}, Callbacks{})
	if !errors.Is(err, broadcast.ErrNoResponders) {
		t.Fatalf("err %v, want no responders", err)
	}
}
