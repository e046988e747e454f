package poll

import (
	"testing"
	"time"
)

// The polling interval: first, and at most.
const (
	firstInterval = time.Millisecond
	maxInterval   = 50 * time.Millisecond
)

// Until calls cond until it returns true; if it has not within the given
// time, it fails t with what was awaited.
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	UntilDetail(t, within, what, func() (bool, string) { return cond(), "" })
}

// UntilNil calls cond until it returns nil; if it has not within the given
// time, it fails t with what was awaited and the last error.
func UntilNil(t testing.TB, within time.Duration, what string, cond func() error) {
	t.Helper()
	UntilDetail(t, within, what, func() (bool, string) {
		if err := cond(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// UntilDetail calls cond until it returns true; if it has not within the
// given time, it fails t with what was awaited and the last detail cond
// returned with false.
//
// cond is called at least once, and once more at the deadline. After
// t.Fatalf, UntilDetail returns (a testing.T's Fatalf does not).
func UntilDetail(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	interval := firstInterval
	for {
		ok, detail := cond()
		if ok {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			if detail == "" {
				t.Fatalf("%s: not reached within %v", what, within)
			} else {
				t.Fatalf("%s: not reached within %v; last: %s", what, within, detail)
			}
			return
		}
		time.Sleep(min(interval, left)) // the polling interval
		interval = min(2*interval, maxInterval)
	}
}
