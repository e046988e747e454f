package rank

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/poll"
)

// Finding 4: a group of requests larger than the queue (an HTTP request's
// n choices) is refused as invalid, naming n and MaxQueue, instead of
// as overloaded at every try; a group the queue holds is taken.
func TestDriverRefusesAGroupLargerThanTheQueue(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hub := broadcast.NewHub()
	cfg := driverConfig(0, 1)
	cfg.MaxQueue = 2
	r := startRank(t, ctx, hub, cfg)
	requester := hub.Connect()
	defer requester.Close()
	poll.Until(t, 10*time.Second, "rank 0 never became ready", func() bool { return r.d.Status().State == "ready" })
	send := func(group int) *replies {
		rep := subscribeReplies(t, requester)
		data, _ := json.Marshal(api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 3, Group: group})
		if err := requester.Publish(&broadcast.Msg{Subject: drvSubj.Generate(), Reply: rep.inbox, Data: data}); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	for range 3 {
		rep := send(3).next(t)
		if !rep.Done || rep.ErrorCode != api.CodeInvalid || rep.ErrorParam != "n" ||
			!strings.Contains(rep.Error, "3 choices") || !strings.Contains(rep.Error, "--max-queue 2") {
			t.Fatalf("a group of 3 with a queue of 2: %+v, want an invalid request naming n, 3 and --max-queue 2", rep)
		}
	}
	for i, rep := range []*replies{send(2), send(2)} {
		if got := rep.next(t); got.Done || got.Token == nil {
			t.Fatalf("request %d of a group of 2: first reply %+v, want a token", i, got)
		}
	}
	cancel()
	if err := r.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
}
