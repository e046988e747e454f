package rank

import (
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
)

// TestLateTickDiscounted: a follower whose heartbeat ticker comes 700 ms
// late (its process starved of CPU) does not count those 700 ms against
// rank 0: 1.2 s after rank 0 was last heard, with 0.7 s of it its own
// stall, rank 0 is not lost; once silent a second of the follower's
// running time, it is. A tick on time takes nothing off.
func TestLateTickDiscounted(t *testing.T) {
	ex, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS})
	if err != nil {
		t.Fatal(err)
	}
	tr := broadcast.NewHub().Connect()
	defer tr.Close()
	t0 := time.Unix(1000, 0)
	now := t0
	cfg := driverConfig(1, 2)
	cfg.Heartbeat, cfg.HeartbeatTimeout, cfg.LivenessGrace = 250*time.Millisecond, time.Second, time.Second
	cfg.Clock = func() time.Time { return now }
	d := NewDriver(cfg, tr, ex, nil) // not running: the test ticks
	d.peerTab.HeardFrom(0, nil, t0)
	d.lastTick = t0
	now = t0.Add(250*time.Millisecond + 700*time.Millisecond)
	d.ticked(now) // 700 ms late
	now = t0.Add(1200 * time.Millisecond)
	d.ticked(now) // on time (250 ms)
	if lost, s := d.peerTab.Silent(now); lost != -1 {
		t.Fatalf("rank %d lost after %v of silence, 0.7 s of it this process's own stall", lost, s)
	}
	now = t0.Add(1701 * time.Millisecond)
	if lost, s := d.peerTab.Silent(now); lost != 0 || s != 1001*time.Millisecond {
		t.Fatalf("silent = %d, %v; want rank 0 silent 1.001 s of this process's running time", lost, s)
	}
}
