package fanout

import (
	"fmt"
	"io"

	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
)

// RunServer is the NATS server process of bench broadcast's NATS case: an
// embedded NATS server on loopback with a random token, in a process of
// its own as under launch. It prints "addr URL", runs until stdin ends and
// then prints {"cpu_ns"}, its CPU time since it started serving.
func RunServer(stdin io.Reader, stdout io.Writer) error {
	srv, err := natsbus.ServeLoopback()
	if err != nil {
		return err
	}
	defer srv.Close()
	cpu0 := selfCPU()
	if _, err := fmt.Fprintf(stdout, "addr %s\n", srv.URL()); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, stdin)
	return stats.WriteJSONLine(stdout, publisherReport{CPUNS: int64(selfCPU() - cpu0)})
}
