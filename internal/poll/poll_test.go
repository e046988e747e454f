package poll

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the failure instead of
// ending the test, so that the failure path can be checked. Its other
// methods are those of the embedded (nil) TB: calling one panics.
type recorder struct {
	testing.TB
	helper int
	fatal  []string
}

func (r *recorder) Helper() { r.helper++ }

func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = append(r.fatal, fmt.Sprintf(format, args...))
}

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	r := &recorder{}
	calls := 0
	Until(r, 30*time.Second, "the fifth call", func() bool { calls++; return calls == 5 })
	if len(r.fatal) != 0 || calls != 5 {
		t.Fatalf("%d calls, failures %q", calls, r.fatal)
	}
	if r.helper == 0 {
		t.Error("Until did not call t.Helper")
	}
}

func TestUntilNilReturnsAtTheFirstNil(t *testing.T) {
	r := &recorder{}
	calls := 0
	UntilNil(r, 30*time.Second, "the third call", func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if len(r.fatal) != 0 || calls != 3 {
		t.Fatalf("%d calls, failures %q", calls, r.fatal)
	}
}

// Each variant, with a condition that never holds, gives up after its time
// (not before) with one failure naming what it awaited and the last call's
// detail.
func TestFailsWhenTheConditionNeverHolds(t *testing.T) {
	const within = 30 * time.Millisecond
	for _, tc := range []struct {
		name string
		wait func(r *recorder, next func() int)
		want func(calls int) string
	}{
		{"Until", func(r *recorder, next func() int) {
			Until(r, within, "the flag", func() bool { next(); return false })
		}, func(int) string { return "the flag: not reached within 30ms" }},
		{"UntilDetail", func(r *recorder, next func() int) {
			UntilDetail(r, within, "three replies", func() (bool, string) { return false, fmt.Sprintf("%d so far", next()) })
		}, func(n int) string { return fmt.Sprintf("three replies: not reached within 30ms; last: %d so far", n) }},
		{"UntilNil", func(r *recorder, next func() int) {
			UntilNil(r, within, "the listener", func() error { return fmt.Errorf("dial #%d: refused", next()) })
		}, func(n int) string {
			return fmt.Sprintf("the listener: not reached within 30ms; last: dial #%d: refused", n)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			calls := 0
			start := time.Now()
			tc.wait(r, func() int { calls++; return calls })
			if took := time.Since(start); took < within {
				t.Errorf("gave up after %v, before its %v", took, within)
			}
			if want := []string{tc.want(calls)}; !slices.Equal(r.fatal, want) {
				t.Errorf("failures %q, want %q", r.fatal, want)
			}
			if calls < 2 {
				t.Errorf("condition called %d times in %v", calls, within)
			}
			if r.helper == 0 {
				t.Errorf("%s did not call t.Helper", tc.name)
			}
		})
	}
}
