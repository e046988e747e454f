package job

import (
	"strings"
	"testing"
	"time"
)

const dump = `flight recorder job j rank 0: phase idle for 1ms; last 3 of 9 steps (ms):
      step start                       rows      await    publish    forward     sample      reply      total
         7 2026-01-02T03:04:05.000100     0      0.001      0.000      0.000      0.000      0.000      0.002
         8 2026-01-02T03:04:05.000200     2      0.010      0.020      0.300      0.040      0.050      0.500
         9 2026-01-02T03:04:06.000000     2      0.010      0.020      0.300      0.040      0.050      0.600
`

func TestParseDump(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 150_000, time.UTC)
	steps, complete, err := parseDump([]byte(dump), since)
	if err != nil || !complete {
		t.Fatalf("complete %v, err %v", complete, err)
	}
	if len(steps) != 2 || steps[0].Step != 8 || steps[1].Step != 9 || steps[0].Rows != 2 || steps[1].TotalMs != 0.6 {
		t.Fatalf("steps %+v", steps)
	}
	s := steps[0]
	if s.AwaitMs != 0.01 || s.PublishMs != 0.02 || s.ForwardMs != 0.3 || s.SampleMs != 0.04 || s.ReplyMs != 0.05 || s.TotalMs != 0.5 {
		t.Errorf("phases of step 8: %+v", s)
	}
	// A dump cut short is not complete.
	if _, complete, err := parseDump([]byte(dump[:len(dump)-100]), since); err == nil && complete {
		t.Error("a truncated dump parsed as complete")
	}
}

func TestParseDumpErrorsQuoteTheLine(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"header", "no header here\n", "unexpected header"},
		{"count", "x; last many of 9 steps (ms):\n", "header"},
		{"fields", strings.Replace(dump, "     0      0.001", "     0", 1), `step line "         7`},
		{"number", strings.Replace(dump, "0.040", "fast", 1), `step line "         8`},
		{"start", strings.Replace(dump, "2026-01-02T03:04:05.000200", "yesterday", 1), `step line "         8`},
	} {
		_, _, err := parseDump([]byte(tc.data), time.Time{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func TestTail(t *testing.T) {
	if got := Tail("abcdef", 3); got != "…def" {
		t.Errorf("Tail = %q", got)
	}
	if got := Tail("abc", 3); got != "abc" {
		t.Errorf("Tail of a short string = %q", got)
	}
}
