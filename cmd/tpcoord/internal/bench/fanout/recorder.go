package fanout

import (
	"slices"
	"sync"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
)

// recorder keeps a follower's receive-minus-send per sequence number.
// record may run on a NATS callback goroutine while the owner waits on
// done.
type recorder struct {
	verify *broadcast.Codec // with a key: checks each message's MAC first

	mu     sync.Mutex
	lat    []int64 // -1: not received
	got    int
	badMAC int
	done   chan struct{} // closed once the run is over for this follower
	ended  bool
}

func newRecorder(n int) *recorder {
	r := &recorder{lat: make([]int64, n), done: make(chan struct{})}
	for i := range r.lat {
		r.lat[i] = -1
	}
	return r
}

// receive records msg as received now, after verifying its MAC when
// the recorder has a key (the verification's cost is in the latency): a
// message whose MAC does not verify is counted, not recorded. It reports
// what record does.
func (r *recorder) receive(msg []byte) bool {
	if r.verify != nil && r.verify.VerifyMAC(msg) != nil {
		r.mu.Lock()
		r.badMAC++
		r.mu.Unlock()
		return false
	}
	return r.record(time.Now().UnixNano(), msg)
}

// record takes the receive time (Unix ns) and a message; it reports
// whether the run is over for this follower (end marker, or every message
// received). A message too short for the header is ignored.
func (r *recorder) record(now int64, msg []byte) bool {
	seq, sentAt, ok := header(msg)
	if !ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return true
	}
	if seq < uint64(len(r.lat)) && r.lat[seq] < 0 {
		r.lat[seq] = max(0, now-sentAt)
		r.got++
	}
	if seq == endSeq || r.got == len(r.lat) {
		r.ended = true
		close(r.done)
	}
	return r.ended
}

// snapshot is the latencies so far and the messages refused for their
// MAC; late records change nothing after it.
func (r *recorder) snapshot() ([]int64, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = true
	return slices.Clone(r.lat), r.badMAC
}
