//go:build !linux

package fanout

import "time"

// pacer sleeps with time.Sleep here: coarser than the Linux timerfd.
type pacer struct{}

func newPacer() (*pacer, error)            { return &pacer{}, nil }
func (*pacer) sleep(d time.Duration) error { time.Sleep(d); return nil }
func (*pacer) Close() error                { return nil }
