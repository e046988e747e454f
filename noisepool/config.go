package noisepool

import (
	"errors"
	"math"
	"math/bits"
	"time"

	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// Config sizes a Pool. DefaultConfig gives the values an agent uses unless
// told otherwise; Validate's errors name the field.
type Config struct {
	// Vocab is the length of a noise row.
	Vocab int
	// Rows is the number of vocab-length rows the pool owns.
	// It bounds the pool's memory at Rows·Vocab·4 bytes and must cover the
	// rows the consumer holds at once (a batch) plus the rows prefetched for
	// the next steps, plus one per producer.
	Rows int
	// Producers is the number of background goroutines filling rows.
	// 0 disables prefetching: every Take is inline. AutoProducers (the
	// default) lets New size them for Batch rows every Step (ProducersFor).
	Producers int
	// Batch and Step are the consumer's rows per step and step time, which
	// AutoProducers sizes the producers for.
	Batch int
	Step  time.Duration
	// Lookahead is how many rows of each active stream the producers keep
	// ready ahead of the stream's next row.
	Lookahead int
	// MaxBytes refuses configurations whose rows would take more memory.
	MaxBytes int64
	// Form is what a row holds: exact Gumbel values or upper bounds on
	// them (FormBound, see BoundFromBits). FormAuto, the zero value, picks
	// DefaultForm.
	Form Form
	// FillChunk is the number of values a producer writes between checks for
	// shutdown; it bounds how long Close waits for a fill in progress. 0 means
	// the default (8192).
	FillChunk int
}

// DefaultConfig returns the configuration for vocab 100352 at batch 32 and
// 20 ms steps: 128 rows (one step held by the sampler, two steps
// prefetched, 32 spare), 51 MB of noise, the producers that keep up
// (AutoProducers), rows in the form this machine fills fastest (FormAuto).
func DefaultConfig() Config {
	return Config{
		Vocab:     100352,
		Rows:      128,
		Producers: AutoProducers,
		Batch:     32,
		Step:      20 * time.Millisecond,
		Lookahead: 2,
		MaxBytes:  1 << 30,
		FillChunk: 8192,
	}
}

// Bytes is the memory the pool's rows and their block maxima take
// (meaningful once Validate passed).
func (c Config) Bytes() int64 { return int64(c.Rows) * int64(c.Vocab+BlockCount(c.Vocab)) * 4 }

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Vocab < 1:
		return fielderr.New("Vocab", "must be >= 1, got %d", c.Vocab)
	case c.Vocab > 1<<31-1:
		return fielderr.New("Vocab", "must fit a token index (int32), got %d", c.Vocab)
	case c.Producers < AutoProducers:
		return fielderr.New("Producers", "must be >= 0, or %d for auto, got %d", AutoProducers, c.Producers)
	case c.Producers == AutoProducers && c.Batch < 1:
		return fielderr.New("Batch", "must be >= 1 to size the producers (Producers auto), got %d", c.Batch)
	case c.Producers == AutoProducers && c.Step <= 0:
		return fielderr.New("Step", "must be > 0 to size the producers (Producers auto), got %v", c.Step)
	case c.Producers == AutoProducers && c.Rows < 2:
		return fielderr.New("Rows", "must be at least 2 with auto producers (one producer + 1) so a Take always finds a slot, got %d", c.Rows)
	case c.Producers >= 0 && c.Rows < c.Producers+1:
		return fielderr.New("Rows", "must be at least the producers + 1 = %d so a Take always finds a slot, got %d", c.Producers+1, c.Rows)
	case c.Lookahead < 0:
		return fielderr.New("Lookahead", "must be >= 0, got %d", c.Lookahead)
	case c.MaxBytes <= 0:
		return fielderr.New("MaxBytes", "must be > 0, got %d", c.MaxBytes)
	case c.Form > FormBound:
		return fielderr.New("Form", "must be auto, exact or bound, got %v", c.Form)
	case c.FillChunk < 0:
		return fielderr.New("FillChunk", "must be >= 0, got %d", c.FillChunk)
	}
	// Rows·(Vocab + its block maxima)·4 in 128 bits, so that no product
	// overflows unnoticed (Vocab < 2^31: the factor fits in 64 bits).
	hi, lo := bits.Mul64(uint64(c.Rows), uint64(c.Vocab+BlockCount(c.Vocab))*4)
	if hi != 0 || lo > uint64(c.MaxBytes) || lo/4 > math.MaxInt {
		return fielderr.New("Rows", "%d rows × (vocab %d + %d block maxima) × 4 bytes exceeds the limit of %d bytes; lower the rows or raise the limit",
			c.Rows, c.Vocab, BlockCount(c.Vocab), c.MaxBytes)
	}
	return nil
}

// Errors returned by Pool methods.
var (
	// ErrClosed is returned by Take after Close.
	ErrClosed = errors.New("noisepool: pool closed")
	// ErrExhausted is returned by Take when the consumer already holds so
	// many rows that no slot is left (give the pool more rows, or release rows).
	ErrExhausted = errors.New("noisepool: every row is held by the consumer or being filled; release rows or give the pool more rows")
	// ErrNotHeld is returned by Release for a row that is not currently
	// handed out (released twice, or from another pool).
	ErrNotHeld = errors.New("noisepool: row released twice or not from this pool")
)
