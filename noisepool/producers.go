package noisepool

import (
	"math"
	"time"
)

// AutoProducers as Config.Producers lets New choose the number of
// producers with ProducersFor, from the cost of a row measured on this
// machine (Calibrate) and the consumer's Batch and Step.
const AutoProducers = -1

// producerShare is the share of a core a producer may spend keeping up:
// the rest absorbs the step's jitter and leaves room for the consumer.
const producerShare = 0.5

// Sizing is how New sized its producers.
type Sizing struct {
	Producers  int     // producers started
	NsPerValue float64 // measured cost of one value of the pool's form on one core (0 if not measured)
	Need       float64 // cores' worth of filling a batch of rows per step needs (0 if not measured)
	KeepsUp    bool    // the producers fill a batch of rows per step within producerShare of their cores
}

// ProducersFor returns how many producers fill batch rows of vocab values
// every step, each spending at most half of its core, at nsPerValue per
// value: ceil(batch · vocab · nsPerValue / (step / 2)), at least 1 and at
// most max(1, procs-1), so that one core stays with the consumer. need is
// the cores' worth of work (batch · vocab · nsPerValue / step); keepsUp is
// false when the cap leaves too few producers, and rows will then be
// generated inline by Take, on the consumer's critical path.
//
// For example, batch 32 and vocab 100352 (3.2 M values a step) at a 20 ms
// step: bound rows at about 1.7 ns a value (block maxima included) need
// 0.28 cores, one producer; exact rows on the portable kernel at about
// 7.5–12 ns need 1.2–1.9 cores, three or four producers, which a 2-core
// host cannot give.
func ProducersFor(batch, vocab int, step time.Duration, nsPerValue float64, procs int) (n int, need float64, keepsUp bool) {
	if batch < 1 || vocab < 1 || step <= 0 || !(nsPerValue > 0) {
		return 1, 0, true
	}
	need = float64(batch) * float64(vocab) * nsPerValue / float64(step.Nanoseconds())
	want := math.Ceil(need / producerShare)
	limit := float64(max(1, procs-1))
	if want <= limit {
		return max(1, int(want)), need, true
	}
	return int(limit), need, false
}

// Calibrate returns what a producer spends per value on a row of form f
// on one core, the row's block maxima included: the fastest of three
// fills of a vocab-length row (at most 2^17 values; a few milliseconds at
// most, once, when a pool starts).
func Calibrate(f Form, vocab int) float64 {
	if f == FormAuto {
		f = DefaultForm()
	}
	n := min(max(vocab, 2), 1<<17)
	buf, bmax := make([]float32, n), make([]float32, BlockCount(n))
	best := time.Duration(math.MaxInt64)
	for i := range 3 {
		start := time.Now()
		fillForm(f, RowSeed(uint64(i), 0), 0, buf)
		FillBlockMax(buf, bmax)
		best = min(best, time.Since(start))
	}
	return float64(best.Nanoseconds()) / float64(n)
}
