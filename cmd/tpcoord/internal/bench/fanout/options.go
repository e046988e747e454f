package fanout

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
)

const (
	maxFollowers = 64
	minMessages  = 10
	maxRounds    = 100

	// TargetP50Ratio is the target for NATS's median step latency as a
	// multiple of the raw TCP fan-out's, at 8 followers; reported, never
	// asserted.
	TargetP50Ratio = 1.5
	// TargetP99Ratio is the same target for the 99th percentile.
	TargetP99Ratio = 2.0

	// readyTimeout bounds the start of a case's processes.
	readyTimeout = 60 * time.Second
	// exitTimeout bounds each process's exit once the case is over.
	exitTimeout = 10 * time.Second
)

// Options configure Run. Errors of Validate name the tpcoord flag.
type Options struct {
	Self              string        // the tpcoord binary the processes are started from
	Followers         []int         // --followers: follower process counts, 1..64
	Payload           int           // --payload: message size, 16..1 MiB
	Interval          time.Duration // --interval: between two published messages
	Messages          int           // --messages: per case, >= 10 (the first 5% are warm-up)
	Rounds            int           // --rounds: of (tcp, nats) per follower count
	JSON              bool          // --json: JSON lines instead of a table
	NATSURL           string        // --nats: an external server instead of the embedded one
	ServerInPublisher bool          // --server-in-publisher: as launch --nats-in-rank0
	TuneRuntime       bool          // --tune-runtime: the runtime settings launch gives ranks
	MAC               bool          // --mac: also a NATS case with a keyed MAC on every message
	// Transports (--transports): of tcp, nats and gloo; empty: tcp and
	// nats. A round's cases run in the order of kinds whatever the order
	// given.
	Transports []string
	// Python (--python) runs the gloo transport's processes; ResolveGloo
	// sets it.
	Python string

	keyFile string // with MAC: the job key the case's processes share (writeKey)
	glooDir string // with gloo: its program and stores (writeGloo)
}

// transportNames are the transports --transports accepts.
var transportNames = []string{"tcp", "nats", "gloo"}

// Validate checks o; its errors name the flag.
func (o Options) Validate() error {
	if len(o.Followers) == 0 {
		return errors.New("--followers: give at least one count")
	}
	for _, n := range o.Followers {
		if n < 1 || n > maxFollowers {
			return fmt.Errorf("--followers: %d is outside 1..%d", n, maxFollowers)
		}
	}
	if o.Payload < minPayload || o.Payload > maxPayload {
		return fmt.Errorf("--payload: %d is outside %d..%d bytes", o.Payload, minPayload, maxPayload)
	}
	if o.MAC && o.Payload < minPayload+broadcast.MACSize {
		return fmt.Errorf("--payload: %d bytes leave no room for the MAC with --mac (at least %d)", o.Payload, minPayload+broadcast.MACSize)
	}
	if o.Interval <= 0 {
		return fmt.Errorf("--interval: must be > 0, got %v", o.Interval)
	}
	if o.Messages < minMessages {
		return fmt.Errorf("--messages: must be >= %d, got %d", minMessages, o.Messages)
	}
	if o.Rounds < 1 || o.Rounds > maxRounds {
		return fmt.Errorf("--rounds: %d is outside 1..%d", o.Rounds, maxRounds)
	}
	if o.ServerInPublisher && o.NATSURL != "" {
		return errors.New("--server-in-publisher: not with --nats (the server is given)")
	}
	if err := o.validateTransports(); err != nil {
		return err
	}
	if o.Self == "" {
		return errors.New("options: Self, the tpcoord binary to start the processes from, is not set")
	}
	return nil
}

func (o Options) validateTransports() error {
	for i, t := range o.Transports {
		if !slices.Contains(transportNames, t) {
			return fmt.Errorf("--transports: %q is not one of %s", t, strings.Join(transportNames, ", "))
		}
		if slices.Contains(o.Transports[:i], t) {
			return fmt.Errorf("--transports: %s is given twice", t)
		}
	}
	if o.MAC && !o.has("nats") {
		return errors.New("--mac: adds a NATS case; nats is not in --transports")
	}
	return nil
}

// has reports whether transport is one of o's.
func (o Options) has(transport string) bool {
	if len(o.Transports) == 0 {
		return transport == "tcp" || transport == "nats"
	}
	return slices.Contains(o.Transports, transport)
}

// server names where the NATS server runs, as Result.NATSServer reports it.
func (o Options) server() string {
	switch {
	case o.NATSURL != "":
		return "external"
	case o.ServerInPublisher:
		return "in-publisher"
	}
	return "own-process"
}

// writeKey makes a new key for the MAC cases and writes it, as launch
// does, to a 0600 file in a new 0700 directory, which it returns for the
// caller to remove.
func (o *Options) writeKey() (string, error) {
	key, err := broadcast.NewKey()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "tpcoord-bench-key-")
	if err != nil {
		return "", err
	}
	o.keyFile = filepath.Join(dir, "job.key")
	if err := broadcast.WriteKeyFile(o.keyFile, key); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// Warmup is the number of leading messages not counted: 5%, at least 1.
func Warmup(messages int) int { return max(1, messages/20) }

// followerDeadline bounds a spawned process's life, so a lost end marker
// or a stuck publisher cannot keep it running.
func followerDeadline(messages int, interval time.Duration) time.Duration {
	return readyTimeout + 3*time.Duration(messages)*interval + 10*time.Second
}
