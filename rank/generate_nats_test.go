package rank

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/internal/freeport"
	"github.com/tpcoord/tpcoord/rank/client"
)

func startNATS(t *testing.T, port int) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready for connections")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// TestGenerateAcrossNATSRestart: the NATS server is down for a few seconds
// while a request decodes. The client's keepalives pile up in nats.go's
// reconnect buffer and reach the new server at once, possibly before rank 0
// has resubscribed; that burst of "no responders" must not end the request
// as lost. (The request may still fail for another reason, such as replies
// published while the client was away; only a false "lost" fails the test.)
func TestGenerateAcrossNATSRestart(t *testing.T) {
	// A port outside the kernel's ephemeral range: the clients' reconnects
	// during the outage must not take it (see freeport).
	port, err := freeport.Pick("127.0.0.1", false)
	if err != nil {
		t.Fatal(err)
	}
	s := startNATS(t, port)
	cfg := natsbus.DefaultConfig()
	cfg.URL = "nats://" + s.Addr().String()
	rank0, err := natsbus.Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	requester, err := natsbus.Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ex, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS, Logits: true, ForwardTime: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := runRank(t, ctx, rank0, driverConfig(0, 1), ex)
	t.Cleanup(func() { cancel(); _ = r.wait(t); requester.Close() })

	waitServing(t, requester, 1)
	errc := make(chan error, 1)
	streaming := make(chan struct{}, 1)
	go func() {
		gctx, gcancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer gcancel()
		_, err := client.Generate(gctx, requester, drvSubj, &api.GenerateRequest{PromptTokenIDs: []int32{7}, MaxTokens: 400, Params: greedyParams()}, func(int, int32) {
			select {
			case streaming <- struct{}{}:
			default:
			}
		})
		errc <- err
	}()
	select {
	case <-streaming:
	case err := <-errc:
		t.Fatalf("request ended before the restart: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no token within 30s")
	}
	s.Shutdown()
	s.WaitForShutdown()
	// The outage itself: long enough for three keepalives to pile up.
	<-time.After(3500 * time.Millisecond)
	startNATS(t, port)
	if err := <-errc; errors.Is(err, client.ErrRequestLost) {
		t.Fatalf("after a NATS restart: %v, a false verdict", err)
	}
}
