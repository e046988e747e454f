package rank

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// LoopPhase is where a rank's decode loop is. The flight recorder times
// each step's phases; status names the phase a stuck rank is in.
type LoopPhase uint8

// Phases of one step. Rank 0 goes await → publish → forward → sample →
// reply; followers go await → forward. Idle is rank 0 with nothing to run.
const (
	PhaseIdle    LoopPhase = iota
	PhaseAwait             // rank 0: followers within max-lag; followers: the next step message
	PhasePublish           // rank 0: encode and publish the step
	PhaseForward           // apply the step and run the executor's forward
	PhaseSample            // rank 0: pick the tokens
	PhaseReply             // rank 0: stream tokens and finish requests
	numLoopPhases
)

var loopPhaseNames = [numLoopPhases]string{"idle", "await", "publish", "forward", "sample", "reply"}

func (p LoopPhase) String() string {
	if p < numLoopPhases {
		return loopPhaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", p)
}

// DefaultFlightSteps is how many steps a flight recorder keeps by default.
const DefaultFlightSteps = 256

// flightEntry is one step in the ring; durations in nanoseconds, indexed
// by LoopPhase (idle is never part of a step).
type flightEntry struct {
	step  uint64
	start int64 // unix ns
	end   int64
	rows  int32
	// preempted counts the requests the step preempted (rank 0 with a KV
	// cache).
	preempted int32
	dur       [numLoopPhases]int64
}

// FlightRecorder keeps the phase timings of a rank's last steps and the
// phase the loop is in now. The decode loop writes it (one goroutine);
// status, metrics scrapes and dumps read it from others. Recording does not
// allocate. A nil *FlightRecorder records nothing.
type FlightRecorder struct {
	mu      sync.Mutex
	ring    []flightEntry
	n       uint64 // steps recorded in total
	cur     flightEntry
	inStep  bool
	phase   LoopPhase
	since   time.Time
	metrics *Metrics
	// preempting counts the preemptions of the step about to start.
	preempting int32
}

// NewFlightRecorder keeps the last steps steps (DefaultFlightSteps if
// steps <= 0).
func NewFlightRecorder(steps int) *FlightRecorder {
	if steps <= 0 {
		steps = DefaultFlightSteps
	}
	return &FlightRecorder{ring: make([]flightEntry, steps), since: time.Now()}
}

// enter moves the loop to phase p at now, charging the time since the
// last transition to the phase being left. Entering the current phase
// again changes nothing, so a loop that wakes without work keeps its start.
func (f *FlightRecorder) enter(p LoopPhase, now time.Time) {
	if f == nil {
		return
	}
	f.mu.Lock()
	if p != f.phase {
		f.closePhase(now)
		f.phase, f.since = p, now
		if p != PhaseIdle && !f.inStep {
			f.inStep = true
			f.cur = flightEntry{start: now.UnixNano(), preempted: f.preempting}
			f.preempting = 0
		}
	}
	f.mu.Unlock()
}

// closePhase charges the time in the current phase to the step in
// progress. Called with mu held.
func (f *FlightRecorder) closePhase(now time.Time) {
	if f.inStep && f.phase != PhaseIdle {
		f.cur.dur[f.phase] += now.Sub(f.since).Nanoseconds()
	}
}

// stepDone ends step k (rows sequences) at now: it goes into the ring and
// its phases into the metrics' histograms. The loop is then idle until it
// enters the next phase.
func (f *FlightRecorder) stepDone(k uint64, rows int, now time.Time) {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.closePhase(now)
	e := f.cur
	e.step, e.rows, e.end = k, int32(rows), now.UnixNano()
	if !f.inStep {
		e.start = e.end
	}
	f.ring[f.n%uint64(len(f.ring))] = e
	f.n++
	f.cur, f.inStep = flightEntry{}, false
	f.phase, f.since = PhaseIdle, now
	m := f.metrics
	f.mu.Unlock()
	m.observeStep(&e)
}

// notePreempted records that the step about to start (decided at the
// boundary, before its first phase) preempts n requests.
func (f *FlightRecorder) notePreempted(n int) {
	if f == nil || n == 0 {
		return
	}
	f.mu.Lock()
	f.preempting += int32(n)
	f.mu.Unlock()
}

func nsMs(ns int64) float64 { return float64(ns/1000) / 1000 }

func (e *flightEntry) timing() api.StepTiming {
	return api.StepTiming{
		Step: e.step, Start: time.Unix(0, e.start), Rows: int(e.rows),
		AwaitMs: nsMs(e.dur[PhaseAwait]), PublishMs: nsMs(e.dur[PhasePublish]), ForwardMs: nsMs(e.dur[PhaseForward]),
		SampleMs: nsMs(e.dur[PhaseSample]), ReplyMs: nsMs(e.dur[PhaseReply]), TotalMs: nsMs(e.end - e.start),
		Preempted: int(e.preempted),
	}
}

// FlightSnapshot is the recorder's content at one moment.
type FlightSnapshot struct {
	Phase    LoopPhase
	InPhase  time.Duration
	Recorded uint64           // steps recorded since start
	Steps    []api.StepTiming // oldest first
}

// Snapshot returns the current phase and the last n recorded steps (all
// kept ones if n <= 0), oldest first.
func (f *FlightRecorder) Snapshot(n int, now time.Time) FlightSnapshot {
	if f == nil {
		return FlightSnapshot{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := FlightSnapshot{Phase: f.phase, InPhase: now.Sub(f.since), Recorded: f.n}
	kept := min(f.n, uint64(len(f.ring)))
	if n > 0 && uint64(n) < kept {
		kept = uint64(n)
	}
	s.Steps = make([]api.StepTiming, 0, kept)
	for i := f.n - kept; i < f.n; i++ {
		s.Steps = append(s.Steps, f.ring[i%uint64(len(f.ring))].timing())
	}
	return s
}

// Dump writes the recorder as text: a header line naming the current
// phase and the time in it, then one line per kept step, oldest first.
// label names the rank (for example "job j rank 1").
func (f *FlightRecorder) Dump(w io.Writer, label string, now time.Time) error {
	s := f.Snapshot(0, now)
	if _, err := fmt.Fprintf(w, "flight recorder %s: phase %s for %v; last %d of %d steps (ms):\n",
		label, s.Phase, s.InPhase.Round(time.Microsecond), len(s.Steps), s.Recorded); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "%10s %-26s %5s %10s %10s %10s %10s %10s %10s\n",
		"step", "start", "rows", "await", "publish", "forward", "sample", "reply", "total"); err != nil {
		return err
	}
	for _, t := range s.Steps {
		note := ""
		if t.Preempted > 0 {
			note = fmt.Sprintf(" preempted %d", t.Preempted)
		}
		if _, err := fmt.Fprintf(w, "%10d %-26s %5d %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f%s\n",
			t.Step, t.Start.UTC().Format("2006-01-02T15:04:05.000000"), t.Rows,
			t.AwaitMs, t.PublishMs, t.ForwardMs, t.SampleMs, t.ReplyMs, t.TotalMs, note); err != nil {
			return err
		}
	}
	return nil
}

// statusSteps is how many recent steps a status reply carries.
const statusSteps = 8

// fillStatus adds the current phase, the time in it and the last few
// steps to a status reply.
func (f *FlightRecorder) fillStatus(st *api.RankStatus, now time.Time) {
	if f == nil {
		return
	}
	s := f.Snapshot(statusSteps, now)
	st.Phase, st.PhaseMs, st.RecentSteps = s.Phase.String(), ms(s.InPhase), s.Steps
}
