package noisepool

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// Config sizes a Pool. Each field has a CLI flag (named in Validate's
// errors); DefaultConfig gives the values used when a flag is not set.
type Config struct {
	// Vocab is the length of a noise row (--vocab).
	Vocab int
	// Rows is the number of vocab-length rows the pool owns (--noise-pool-rows).
	// It bounds the pool's memory at Rows·Vocab·4 bytes and must cover the
	// rows the consumer holds at once (a batch) plus the rows prefetched for
	// the next steps, plus one per producer.
	Rows int
	// Producers is the number of background goroutines filling rows
	// (--noise-producers). 0 disables prefetching: every Take is inline.
	Producers int
	// Lookahead is how many rows of each active stream the producers keep
	// ready ahead of the stream's next row (--noise-lookahead).
	Lookahead int
	// MaxBytes refuses configurations whose rows would take more memory
	// (--noise-max-bytes).
	MaxBytes int64
	// FillChunk is the number of values a producer writes between checks for
	// shutdown; it bounds how long Close waits for a fill in progress. 0 means
	// the default (8192). Not a CLI flag.
	FillChunk int
}

// DefaultConfig returns the configuration for vocab 100352 at batch 32: 128
// rows (one step held by the sampler, two steps prefetched, 32 spare),
// 51 MB of noise, one producer.
func DefaultConfig() Config {
	return Config{
		Vocab:     100352,
		Rows:      128,
		Producers: 1,
		Lookahead: 2,
		MaxBytes:  1 << 30,
		FillChunk: 8192,
	}
}

// Bytes is the memory the pool's rows take (meaningful once Validate passed).
func (c Config) Bytes() int64 { return int64(c.Rows) * int64(c.Vocab) * 4 }

// Validate reports the first invalid field; errors name the CLI flag.
func (c Config) Validate() error {
	switch {
	case c.Vocab < 1:
		return fmt.Errorf("--vocab: must be >= 1, got %d", c.Vocab)
	case c.Vocab > 1<<31-1:
		return fmt.Errorf("--vocab: must fit a token index (int32), got %d", c.Vocab)
	case c.Producers < 0:
		return fmt.Errorf("--noise-producers: must be >= 0, got %d", c.Producers)
	case c.Rows < c.Producers+1:
		return fmt.Errorf("--noise-pool-rows: must be at least --noise-producers + 1 = %d so a Take always finds a slot, got %d", c.Producers+1, c.Rows)
	case c.Lookahead < 0:
		return fmt.Errorf("--noise-lookahead: must be >= 0, got %d", c.Lookahead)
	case c.MaxBytes <= 0:
		return fmt.Errorf("--noise-max-bytes: must be > 0, got %d", c.MaxBytes)
	case c.FillChunk < 0:
		return fmt.Errorf("noisepool FillChunk: must be >= 0, got %d", c.FillChunk)
	}
	// Rows·Vocab·4 in 128 bits, so that no product overflows unnoticed.
	hi, lo := bits.Mul64(uint64(c.Rows), uint64(c.Vocab)*4)
	if hi != 0 || lo > uint64(c.MaxBytes) || lo/4 > math.MaxInt {
		return fmt.Errorf("--noise-pool-rows: %d rows × --vocab %d × 4 bytes exceeds --noise-max-bytes %d; lower --noise-pool-rows or raise --noise-max-bytes",
			c.Rows, c.Vocab, c.MaxBytes)
	}
	return nil
}

// Errors returned by Pool methods.
var (
	// ErrClosed is returned by Take after Close.
	ErrClosed = errors.New("noisepool: pool closed")
	// ErrExhausted is returned by Take when the consumer already holds so
	// many rows that no slot is left (raise --noise-pool-rows or release rows).
	ErrExhausted = errors.New("noisepool: every row is held by the consumer or being filled; release rows or raise --noise-pool-rows")
	// ErrNotHeld is returned by Release for a row that is not currently
	// handed out (released twice, or from another pool).
	ErrNotHeld = errors.New("noisepool: row released twice or not from this pool")
)
