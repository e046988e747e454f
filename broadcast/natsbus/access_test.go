//go:build !agentonly

package natsbus

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tpcoord/tpcoord/broadcast"
)

// TestServeJobSplitsRanksAndClients: on a job's server, clients may
// request, cancel, ask status and read their inboxes; publishing a step,
// a heartbeat, a replay request or a control message is refused by the
// server and reaches no rank. Ranks may do anything.
func TestServeJobSplitsRanksAndClients(t *testing.T) {
	subj := broadcast.Subjects{Prefix: "tpc", Job: "j1"}
	s, err := ServeLoopbackJob(subj)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.URL() == s.ClientURL() || !strings.Contains(s.URL(), RankUser+":") || !strings.Contains(s.ClientURL(), ClientUser+":") {
		t.Fatalf("rank URL %s, client URL %s: want two users", Redact(s.URL()), Redact(s.ClientURL()))
	}
	rank, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rank.Close()
	got := make(chan string, 16)
	for _, sub := range []string{subj.Step(), subj.Heartbeats(), subj.Replay(), subj.Control(), subj.Generate(), subj.Status(), subj.Client()} {
		if _, err := rank.Subscribe(sub, func(m *nats.Msg) { got <- m.Subject }); err != nil {
			t.Fatal(err)
		}
	}
	if err := rank.Flush(); err != nil {
		t.Fatal(err)
	}
	denied := make(chan error, 16)
	cl, err := nats.Connect(s.ClientURL(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, forbidden := range []string{subj.Step(), subj.Heartbeat(1), subj.Replay(), subj.Control()} {
		if err := cl.Publish(forbidden, []byte("x")); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-denied:
			if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				t.Fatalf("publish on %s: %v, want a permissions violation", forbidden, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("a client's publish on %s was not refused", forbidden)
		}
	}
	for _, allowed := range []string{subj.Generate(), subj.Status(), subj.Client()} {
		if err := cl.Publish(allowed, []byte("x")); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-got:
			if s != allowed {
				t.Fatalf("a rank got %s, want %s (a client's forbidden publish got through)", s, allowed)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("a client's publish on %s did not arrive", allowed)
		}
	}
	if _, err := cl.Subscribe(subj.Step(), func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-denied:
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("subscribe to steps: %v, want a permissions violation", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a client's subscription to the steps was not refused")
	}
}

func TestServeJobRefusals(t *testing.T) {
	subj := broadcast.Subjects{Prefix: "tpc", Job: "j"}
	for _, tc := range []struct{ rank, client, want string }{
		{"nats://tok@127.0.0.1:0", "nats://client:pw@127.0.0.1:0", "need a user and password"},
		{"nats://rank:pw@127.0.0.1:0", "nats://client@127.0.0.1:0", "empty client user or password"},
		{"nats://rank:pw@127.0.0.1:0", "nats://rank:pw2@127.0.0.1:0", "different users"},
	} {
		s, err := ServeJob(tc.rank, tc.client, subj)
		if err == nil {
			s.Close()
			t.Errorf("ServeJob(%s, %s) succeeded", tc.rank, tc.client)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "pw") {
			t.Errorf("ServeJob(%s, %s): %v, want %q and no password", Redact(tc.rank), Redact(tc.client), err, tc.want)
		}
	}
}
