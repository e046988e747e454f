package fanout

import (
	"context"
	"io"
)

// Floor measures the raw TCP fan-out floor once: one round of the tcp case
// from one publisher process to followers follower processes, with o's
// Self, Payload, Interval, Messages and TuneRuntime (its Followers, Rounds
// and NATS options are not used). It returns the p50 and p99
// publish-to-receive latencies in µs, 0 if nothing arrived.
func Floor(ctx context.Context, o Options, followers int, progress io.Writer) (p50, p99 float64, err error) {
	o.Followers, o.Rounds = []int{followers}, 1
	if err := o.Validate(); err != nil {
		return 0, 0, err
	}
	c := fanoutCase{o: o, n: followers, kind: caseKind{transport: "tcp"}, progress: progress}
	r, err := c.run(ctx)
	return r.p50, r.p99, err
}
