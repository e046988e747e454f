package launch

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/tpcoord/tpcoord/broadcast"
)

// readiness tracks which ranks have reported ready on their heartbeat.
type readiness struct {
	codec   *broadcast.Codec
	mu      sync.Mutex
	seen    []bool
	changed chan struct{}
}

func newReadiness(n int, codec *broadcast.Codec) *readiness {
	return &readiness{codec: codec, seen: make([]bool, n), changed: make(chan struct{}, 1)}
}

func (r *readiness) observe(m *broadcast.Msg) {
	var hb broadcast.Heartbeat
	if r.codec.DecodeHeartbeat(m.Data, &hb) != nil || hb.Phase < broadcast.PhaseReady || hb.Phase > broadcast.PhaseRunning {
		return
	}
	r.mu.Lock()
	if int(hb.Rank) < len(r.seen) {
		r.seen[hb.Rank] = true
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *readiness) missing() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for i, ok := range r.seen {
		if !ok {
			out = append(out, i)
		}
	}
	return out
}

func (r *readiness) done() bool { return len(r.missing()) == 0 }

// writeReadyFile writes info atomically, mode 0600 (the URL carries the
// server's token).
func writeReadyFile(path string, info ReadyInfo) error {
	data, _ := json.Marshal(info)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("ready-file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("ready-file: %w", err)
	}
	return nil
}
