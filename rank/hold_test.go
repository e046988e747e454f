package rank

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank/client"
)

// TestHoldRank0 checks what rank 0 answers between two epochs: its status
// in state "reforming", keepalives for held requests (known) and others
// (not known), new requests (refused, naming the re-formation), and a
// cancel (the held request ends at once with its tokens so far).
func TestHoldRank0(t *testing.T) {
	hub := broadcast.NewHub()
	tr, requester := hub.Connect(), hub.Connect()
	defer tr.Close()
	defer requester.Close()
	a := &Request{Seq: 1, Tag: requester.NewInbox(), Prompt: []int32{3}, MaxTokens: 9, Output: []int32{5, 6}}
	b := &Request{Seq: 2, Tag: requester.NewInbox(), Prompt: []int32{4}, MaxTokens: 9}
	h, err := NewHold(tr, drvSubj, api.RankStatus{Rank: 0, World: 2, Job: drvJob, State: "running", Epoch: 3, Step: 40, Rows: 2, Phase: "await"}, []*Request{a, b})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	st, err := client.CollectStatus(ctx, requester, drvSubj, 100*time.Millisecond)
	if err != nil || len(st) != 1 || st[0].State != StateReforming || st[0].Step != 40 || st[0].Epoch != 3 || st[0].Rows != 0 || st[0].Waiting != 2 || st[0].Phase != "" {
		t.Fatalf("status while re-forming: %+v %v", st, err)
	}
	if !ackOf(t, requester, a.Tag).Known || ackOf(t, requester, "_INBOX.other").Known {
		t.Fatal("keepalive answers: want a held request known and another not")
	}

	rep := subscribeReplies(t, requester)
	data, _ := json.Marshal(api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 4})
	if err := requester.Publish(&broadcast.Msg{Subject: drvSubj.Generate(), Reply: rep.inbox, Data: data}); err != nil {
		t.Fatal(err)
	}
	if r := rep.next(t); !r.Done || r.FinishReason != api.FinishError || !strings.Contains(r.Error, "re-form") {
		t.Fatalf("a new request while re-forming: %+v, want an error naming the re-formation", r)
	}

	final := recordReplies(t, requester, a.Tag)
	msg, _ := json.Marshal(api.Message{Reply: a.Tag, Op: "cancel"})
	if err := requester.Publish(&broadcast.Msg{Subject: drvSubj.Client(), Data: msg}); err != nil {
		t.Fatal(err)
	}
	if f := *final; len(f) != 1 || !f[0].Done || f[0].FinishReason != api.FinishCancelled || !slices.Equal(f[0].Tokens, []int32{5, 6}) {
		t.Fatalf("cancel while re-forming: replies %+v, want one final cancelled reply with tokens [5 6]", f)
	}
	if ackOf(t, requester, a.Tag).Known {
		t.Fatal("the cancelled request is still known")
	}
	if !ackOf(t, requester, b.Tag).Known {
		t.Fatal("keepalive for b: not known")
	}
	if left := h.Close(); len(left) != 1 || left[0] != b {
		t.Fatalf("Close returned %v, want only the request not cancelled", left)
	}
	if b.LastKeepalive.IsZero() {
		t.Fatal("b's keepalive while held was not recorded (the next epoch could not time its requester out)")
	}
	// Closed: nobody answers any more.
	if _, err := broadcast.Request(ctx, requester, drvSubj.Client(), msg); !errors.Is(err, broadcast.ErrNoResponders) {
		t.Fatalf("request after Close: %v, want no responders", err)
	}
	// A handler still running when Close came (NATS does not wait for it)
	// must not end a request that now belongs to the next epoch.
	late := recordReplies(t, requester, b.Tag)
	cancelB, _ := json.Marshal(api.Message{Reply: b.Tag, Op: "cancel"})
	h.onClient(&broadcast.Msg{Subject: drvSubj.Client(), Data: cancelB})
	if len(*late) != 0 {
		t.Fatalf("a cancel handled after Close sent %+v", *late)
	}
}

// TestHoldFollower: a follower between epochs answers status only.
func TestHoldFollower(t *testing.T) {
	hub := broadcast.NewHub()
	tr, requester := hub.Connect(), hub.Connect()
	defer tr.Close()
	defer requester.Close()
	h, err := NewHold(tr, drvSubj, api.RankStatus{Rank: 2, World: 3, Job: drvJob, State: "running", Step: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := client.CollectStatus(ctx, requester, drvSubj, 100*time.Millisecond)
	if err != nil || len(st) != 1 || st[0].Rank != 2 || st[0].State != StateReforming {
		t.Fatalf("status: %+v %v", st, err)
	}
	if _, err := broadcast.Request(ctx, requester, drvSubj.Generate(), []byte("{}")); !errors.Is(err, broadcast.ErrNoResponders) {
		t.Fatalf("generate to a follower's hold: %v, want no responders", err)
	}
}

// TestHoldFail: when the world does not re-form (or the agent stops), every
// held request ends with the error and its tokens so far.
func TestHoldFail(t *testing.T) {
	hub := broadcast.NewHub()
	tr, requester := hub.Connect(), hub.Connect()
	defer tr.Close()
	defer requester.Close()
	rep := subscribeReplies(t, requester)
	h, err := NewHold(tr, drvSubj, api.RankStatus{Rank: 0, World: 2}, []*Request{{Seq: 1, Tag: rep.inbox, Output: []int32{8}}})
	if err != nil {
		t.Fatal(err)
	}
	h.Fail(errors.New("rank 0 is shutting down"))
	if r := rep.next(t); !r.Done || r.FinishReason != api.FinishError || r.Error != "rank 0 is shutting down" || r.ErrorCode != api.CodeUnavailable || !slices.Equal(r.Tokens, []int32{8}) {
		t.Fatalf("held request after Fail: %+v", r)
	}
}

// recordReplies collects the replies published on subject. The hub
// delivers in the publisher's goroutine, so the test reads them once its
// own publish has returned.
func recordReplies(t *testing.T, tr broadcast.Transport, subject string) *[]api.GenerateReply {
	t.Helper()
	var got []api.GenerateReply
	if _, err := tr.Subscribe(subject, func(m *broadcast.Msg) {
		var r api.GenerateReply
		_ = json.Unmarshal(m.Data, &r)
		got = append(got, r)
	}); err != nil {
		t.Fatal(err)
	}
	return &got
}
