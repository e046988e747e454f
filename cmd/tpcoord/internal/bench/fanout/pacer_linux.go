package fanout

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// pacer sleeps with microsecond precision. time.Sleep wakes ~1 ms late on
// Linux (the netpoller waits in whole milliseconds), which would turn a
// 200 µs publishing interval into bursts. nanosleep is precise but keeps
// the goroutine in a system call, and the runtime's sysmon then polls
// every 20 µs to retake its P, a load the followers being measured would
// share. A timerfd read parks the goroutine in the netpoller instead:
// precise, and idle while it waits.
type pacer struct {
	fd int
	f  *os.File
}

func newPacer() (*pacer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd: %w", err)
	}
	return &pacer{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}, nil
}

// sleep waits for d (> 0).
func (p *pacer) sleep(d time.Duration) error {
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(max(d.Nanoseconds(), 1))}
	if err := unix.TimerfdSettime(p.fd, 0, &its, nil); err != nil {
		return fmt.Errorf("timerfd: %w", err)
	}
	var expirations [8]byte
	_, err := p.f.Read(expirations[:])
	return err
}

func (p *pacer) Close() error { return p.f.Close() }
