//go:build !agentonly

package natsbus

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
)

// TestWatchRefusals: on a job's server, a client's publish to another
// job's subject is refused by the server after Publish returned; the
// watcher of that subject gets an error wrapping broadcast.ErrRefused that
// names the subject, a watcher of another subject nothing, and a stopped
// watch nothing.
func TestWatchRefusals(t *testing.T) {
	s, err := ServeLoopbackJob(broadcast.Subjects{Prefix: "tpc", Job: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := Connect(Config{URL: s.ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other := broadcast.Subjects{Prefix: "tpc", Job: "other"}
	refused, stop := c.WatchRefusals(other.Generate())
	defer stop()
	elsewhere, stopElsewhere := c.WatchRefusals(other.Status())
	defer stopElsewhere()
	stopped, stopNow := c.WatchRefusals(other.Generate())
	stopNow()
	if err := c.Publish(&broadcast.Msg{Subject: other.Generate(), Data: []byte("{}")}); err != nil {
		t.Fatalf("publish: %v (the refusal comes later)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-refused:
		if !errors.Is(err, broadcast.ErrRefused) || !strings.Contains(err.Error(), "tpc.other.generate") || !strings.Contains(err.Error(), "permissions violation") {
			t.Fatalf("refusal: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the refused publish was not reported to its watcher")
	}
	// A publish the server carries: its PONG comes after any refusal of
	// the publish before it.
	if err := c.Publish(&broadcast.Msg{Subject: broadcast.Subjects{Prefix: "tpc", Job: "mine"}.Generate(), Data: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-elsewhere:
		t.Fatalf("watcher of another subject got %v", err)
	case err := <-stopped:
		t.Fatalf("stopped watch got %v", err)
	default:
	}
}
