package broadcast

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"sync"
)

// MACSize is the length of the MAC every message carries before its
// checksum: HMAC-SHA256 truncated to 128 bits.
const MACSize = 16

// Codec encodes and decodes one job's messages: it stamps and checks the
// job hash, and with a key seals every message with a MAC and refuses any
// whose MAC does not verify (ErrMAC). Without a key the MAC field is zero
// and not checked. A Codec is safe for concurrent use; in steady state its
// methods allocate nothing beyond what the decoded values need.
type Codec struct {
	job uint64
	key Key

	// free holds idle HMAC states keyed with key, reused across messages
	// so that sealing and verifying do not allocate (hmac.New does,
	// several times). Several, not one: the subscription handlers, the
	// decode loop and the heartbeat loop encode and decode at once; there
	// are never more than the goroutines that used the codec at once. (A
	// sync.Pool would do, but drops states at every GC, and at random
	// under the race detector.)
	mu   sync.Mutex
	free []*macState
}

// macState is one reusable HMAC and room for its sum.
type macState struct {
	h   hash.Hash
	sum [sha256.Size]byte
}

// NewCodec returns the codec of the job whose hash is job (JobHash), with
// key (nil: the job has no key).
func NewCodec(job uint64, key Key) *Codec {
	c := &Codec{job: job}
	if len(key) > 0 {
		c.key = append(Key(nil), key...)
	}
	return c
}

// getMAC takes an idle HMAC state, or makes one; putMAC gives it back.
func (c *Codec) getMAC() *macState {
	c.mu.Lock()
	if n := len(c.free); n > 0 {
		m := c.free[n-1]
		c.free = c.free[:n-1]
		c.mu.Unlock()
		return m
	}
	c.mu.Unlock()
	return &macState{h: hmac.New(sha256.New, c.key)}
}

func (c *Codec) putMAC(m *macState) {
	c.mu.Lock()
	c.free = append(c.free, m)
	c.mu.Unlock()
}

// Keyed reports whether the codec has a key.
func (c *Codec) Keyed() bool { return c.key != nil }

// Job is the job hash the codec stamps and checks.
func (c *Codec) Job() uint64 { return c.job }

// mac computes the MAC of body into m.sum and returns its first MACSize
// bytes.
func (c *Codec) mac(m *macState, body []byte) []byte {
	m.h.Reset()
	m.h.Write(body)
	return m.h.Sum(m.sum[:0])[:MACSize]
}

// SealMAC writes the MAC of msg[:len(msg)-MACSize] into msg's last
// MACSize bytes (zeros without a key). msg must hold at least MACSize
// bytes.
func (c *Codec) SealMAC(msg []byte) {
	n := len(msg) - MACSize
	if c.key == nil {
		clear(msg[n:])
		return
	}
	m := c.getMAC()
	copy(msg[n:], c.mac(m, msg[:n]))
	c.putMAC(m)
}

// VerifyMAC checks that msg's last MACSize bytes are the MAC of the bytes
// before them, in constant time: ErrMAC if not. Without a key it accepts
// any message.
func (c *Codec) VerifyMAC(msg []byte) error {
	if c.key == nil {
		return nil
	}
	n := len(msg) - MACSize
	if n < 0 {
		return fmt.Errorf("%w: %d bytes hold no MAC", ErrShort, len(msg))
	}
	m := c.getMAC()
	ok := hmac.Equal(c.mac(m, msg[:n]), msg[n:])
	c.putMAC(m)
	if !ok {
		return fmt.Errorf("%w under this job's key (forged, sealed with another key, or sent without one)", ErrMAC)
	}
	return nil
}

// seal ends the message that starts at dst[start:]: its MAC, then the
// CRC-32C of everything before the CRC, MAC included.
func (c *Codec) seal(dst []byte, start int) []byte {
	dst = append(dst, make([]byte, MACSize)...)
	c.SealMAC(dst[start:])
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// checkHeader checks, in this order, a message's length, magic, version,
// checksum, job hash, MAC and reserved header bytes. The checksum comes
// before the MAC so that a corrupted message reads as one (ErrChecksum),
// not as a forgery; the job before it, so a message of another job says
// so.
func (c *Codec) checkHeader(b []byte, kind byte) error {
	if len(b) < 16+trailerLen {
		return fmt.Errorf("%w: %d bytes", ErrShort, len(b))
	}
	if b[0] != 'T' || b[1] != 'P' || b[2] != 'C' || b[3] != kind {
		return fmt.Errorf("%w: % x, want TPC%c", ErrMagic, b[:4], kind)
	}
	if b[4] != Version {
		return fmt.Errorf("%w: %d (this build speaks %d)", ErrVersion, b[4], Version)
	}
	body, sum := b[:len(b)-checksumLen], binary.LittleEndian.Uint32(b[len(b)-checksumLen:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return fmt.Errorf("%w: computed %08x, message says %08x", ErrChecksum, got, sum)
	}
	if got := binary.LittleEndian.Uint64(b[8:]); got != c.job {
		return fmt.Errorf("%w: job hash %016x, want %016x", ErrJob, got, c.job)
	}
	if err := c.VerifyMAC(body); err != nil {
		return err
	}
	return checkReserved(b[5:8])
}
