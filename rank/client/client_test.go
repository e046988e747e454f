package client

import (
	"testing"
	"time"
)

// TestKeepaliveVerdict: the client's rule for giving up on rank 0. A burst
// of answers (keepalives nats.go buffered while disconnected, answered all
// at once) never decides; answers spread over time do; a "known" answer or
// a change of kind starts over.
func TestKeepaliveVerdict(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	nobody, unknown, known := keepaliveAnswer{nobody: true}, keepaliveAnswer{}, keepaliveAnswer{known: true}
	type step struct {
		a    keepaliveAnswer
		at   time.Duration
		lost bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"nobody: a burst, then one a second", []step{
			{nobody, 0, false}, {nobody, 0, false}, {nobody, 0, false}, {nobody, 0, false}, {nobody, 0, false},
			{nobody, time.Second, false}, {nobody, 2 * time.Second, false}, {nobody, 3 * time.Second, true}}},
		{"nobody: one a second", []step{
			{nobody, 0, false}, {nobody, time.Second, false}, {nobody, 2 * time.Second, false}, {nobody, 3 * time.Second, true}}},
		{"nobody: rank 0 back in between", []step{
			{nobody, 0, false}, {nobody, time.Second, false}, {nobody, 2 * time.Second, false}, {known, 3 * time.Second, false},
			{nobody, 4 * time.Second, false}, {nobody, 5 * time.Second, false}, {nobody, 6 * time.Second, false}, {nobody, 7 * time.Second, true}}},
		{"unknown: a burst, then a second later", []step{
			{unknown, 0, false}, {unknown, 0, false}, {unknown, 0, false}, {unknown, time.Second, true}}},
		{"unknown between known ones", []step{
			{unknown, 0, false}, {known, time.Second, false}, {unknown, 2 * time.Second, false}, {known, 3 * time.Second, false}}},
		{"kinds alternating", []step{
			{unknown, 0, false}, {nobody, time.Second, false}, {unknown, 2 * time.Second, false}, {nobody, 3 * time.Second, false},
			{nobody, 4 * time.Second, false}, {nobody, 5 * time.Second, false}, {nobody, 6 * time.Second, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v keepaliveVerdict
			for i, s := range tc.steps {
				lost, why := v.observe(s.a, at(s.at))
				if lost != s.lost {
					t.Fatalf("answer %d (%+v at %v): lost = %v (%q), want %v", i, s.a, s.at, lost, why, s.lost)
				}
			}
		})
	}
}
