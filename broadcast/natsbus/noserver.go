//go:build agentonly

package natsbus

import (
	"errors"

	"github.com/tpcoord/tpcoord/broadcast"
)

// HasServer reports whether this build embeds the NATS server: the
// agent-only build (-tags agentonly, tpcoord-agent) does not. Leaving out
// nats-server's code took about a sixth off the CPU time of each of its
// process starts (docs/benchmarks.md, "launch").
const HasServer = false

// ErrNoServer is what starting a server returns in a build without one.
var ErrNoServer = errors.New("nats-serve: this build (tpcoord-agent) has no NATS server: host it with tpcoord (agent --nats-serve) or run nats-server")

// Serve returns ErrNoServer: this build has no server.
func Serve(string) (*Server, error) { return nil, ErrNoServer }

// ServeJob returns ErrNoServer: this build has no server.
func ServeJob(string, string, broadcast.Subjects) (*Server, error) { return nil, ErrNoServer }

// ServeLoopback returns ErrNoServer: this build has no server.
func ServeLoopback() (*Server, error) { return nil, ErrNoServer }

// ServeLoopbackJob returns ErrNoServer: this build has no server.
func ServeLoopbackJob(broadcast.Subjects) (*Server, error) { return nil, ErrNoServer }
