package worker

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Protocol versions. The agent offers the highest version it speaks; the
// worker answers the highest version it speaks that is no higher than the
// offer, and both speak that one for the whole connection.
const (
	// ProtocolV1: every FORWARD carries every row's whole token history.
	ProtocolV1 uint32 = 1
	// ProtocolV2: FORWARD carries deltas: finished ids, new sequences
	// whole, known ones only the tokens appended since the last FORWARD.
	ProtocolV2 uint32 = 2
	// ProtocolV3: a paged KV cache. HELLO_OK reports the worker's block
	// pool; FORWARD rows carry block tables and may feed part of a
	// sequence (chunked prefill), with a flag for the rows to sample; a
	// new sequence may start after a cached prefix in blocks it shares.
	ProtocolV3 uint32 = 3
	// ProtocolVersion is the highest version this package speaks.
	ProtocolVersion = ProtocolV3
)

// negotiate picks the version a worker speaking up to highest (1 or more)
// answers an agent that offers offer.
func negotiate(offer, highest uint32) (uint32, error) {
	if offer < ProtocolV1 {
		return 0, fmt.Errorf("protocol version %d offered; this worker speaks %s", offer, versionRange(highest))
	}
	return min(offer, highest), nil
}

// versionRange names the versions from 1 to highest.
func versionRange(highest uint32) string {
	if highest <= ProtocolV1 {
		return "1"
	}
	return fmt.Sprintf("1 to %d", highest)
}

// hello is the HELLO body and, with PID and Name, the HELLO_OK body: the
// worker echoes the values it runs with and the agent compares them.
type hello struct {
	Version  uint32
	Rank     uint32
	World    uint32
	Vocab    uint32
	MaxBatch uint32
	EOS      int32
	DType    DType
	Order    uint8
	Logits   bool   // HELLO only: this rank receives logits
	ShmSize  uint64 // HELLO only
	ShmPath  string // HELLO only
	PID      uint32 // HELLO_OK only
	Name     string // HELLO_OK only
	// HELLO_OK version 3 only: the worker's KV cache. In the agent's own
	// record BlockSize is its --block-size (0: not checked).
	BlockSize   uint32 // tokens per block
	Blocks      uint32 // blocks in the pool, 0: no paged cache
	MaxModelLen uint32 // the model's context, 0: none
}

func appendHello(dst []byte, h *hello) []byte {
	dst, at := beginFrame(dst, frameHello)
	dst = appendHelloFixed(dst, h)
	var logits uint8
	if h.Logits {
		logits = 1
	}
	dst = append(dst, logits, 0)
	dst = binary.LittleEndian.AppendUint64(dst, h.ShmSize)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(h.ShmPath)))
	dst = append(dst, h.ShmPath...)
	return endFrame(dst, at)
}

func appendHelloOK(dst []byte, h *hello) []byte {
	dst, at := beginFrame(dst, frameHelloOK)
	dst = appendHelloFixed(dst, h)
	dst = binary.LittleEndian.AppendUint16(dst, 0)
	dst = binary.LittleEndian.AppendUint32(dst, h.PID)
	name := h.Name
	if len(name) > 1024 {
		name = name[:1024]
	}
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(name)))
	dst = append(dst, name...)
	if h.Version >= ProtocolV3 {
		// 34+q: block size, blocks, max model len.
		for _, v := range [...]uint32{h.BlockSize, h.Blocks, h.MaxModelLen} {
			dst = binary.LittleEndian.AppendUint32(dst, v)
		}
	}
	return endFrame(dst, at)
}

func appendHelloFixed(dst []byte, h *hello) []byte {
	for _, v := range [...]uint32{h.Version, h.Rank, h.World, h.Vocab, h.MaxBatch, uint32(h.EOS)} {
		dst = binary.LittleEndian.AppendUint32(dst, v)
	}
	return append(dst, uint8(h.DType), h.Order)
}

func decodeHelloFixed(b []byte, h *hello) {
	le := binary.LittleEndian
	h.Version, h.Rank, h.World, h.Vocab, h.MaxBatch = le.Uint32(b[0:]), le.Uint32(b[4:]), le.Uint32(b[8:]), le.Uint32(b[12:]), le.Uint32(b[16:])
	h.EOS = int32(le.Uint32(b[20:]))
	h.DType, h.Order = DType(b[24]), b[25]
}

func decodeHello(b []byte, h *hello) error {
	if len(b) < helloFixedSize {
		return fmt.Errorf("%w: HELLO of %d bytes (at least %d)", errGarbage, len(b), helloFixedSize)
	}
	decodeHelloFixed(b, h)
	h.Logits = b[26] == 1
	h.ShmSize = binary.LittleEndian.Uint64(b[28:])
	n := int(binary.LittleEndian.Uint16(b[36:]))
	if len(b) != helloFixedSize+n {
		return fmt.Errorf("%w: HELLO of %d bytes with a %d-byte path", errGarbage, len(b), n)
	}
	h.ShmPath = string(b[helloFixedSize:])
	return nil
}

func decodeHelloOK(b []byte, h *hello) error {
	if len(b) < helloOKFixedSize {
		return fmt.Errorf("%w: HELLO_OK of %d bytes (at least %d)", errGarbage, len(b), helloOKFixedSize)
	}
	decodeHelloFixed(b, h)
	h.PID = binary.LittleEndian.Uint32(b[28:])
	n := int(binary.LittleEndian.Uint16(b[32:]))
	kv := 0
	if h.Version >= ProtocolV3 {
		kv = helloOKKVSize
	}
	if len(b) != helloOKFixedSize+n+kv {
		return fmt.Errorf("%w: HELLO_OK of version %d of %d bytes with a %d-byte name (want %d)", errGarbage, h.Version, len(b), n, helloOKFixedSize+n+kv)
	}
	h.Name = string(b[helloOKFixedSize : helloOKFixedSize+n])
	if kv > 0 {
		k := b[helloOKFixedSize+n:]
		le := binary.LittleEndian
		h.BlockSize, h.Blocks, h.MaxModelLen = le.Uint32(k), le.Uint32(k[4:]), le.Uint32(k[8:])
	}
	return nil
}

// helloMismatch names every field where the worker's HELLO_OK (b) differs
// from the agent's HELLO (a). The version differs legitimately: the worker
// may answer any version from 1 to the one offered.
func helloMismatch(a, b *hello) error {
	var diffs []string
	add := func(field string, av, bv any) {
		if av != bv {
			diffs = append(diffs, fmt.Sprintf("%s: agent has %v, worker has %v", field, av, bv))
		}
	}
	if b.Version < ProtocolV1 || b.Version > a.Version {
		add("protocol version", versionRange(a.Version), b.Version)
	}
	add("rank", a.Rank, b.Rank)
	add("world size", a.World, b.World)
	add("vocab", a.Vocab, b.Vocab)
	add("max batch", a.MaxBatch, b.MaxBatch)
	add("eos", a.EOS, b.EOS)
	add("dtype", a.DType.String(), b.DType.String())
	add("byte order", orderName(a.Order), orderName(b.Order))
	if b.Version >= ProtocolV3 && b.Blocks > 0 {
		// Block size only matters to a worker with a pool: the agent's
		// tables index it in blocks of the agent's size.
		if b.BlockSize == 0 {
			diffs = append(diffs, fmt.Sprintf("block size: worker has 0 with %d blocks", b.Blocks))
		} else if a.BlockSize != 0 {
			add("block size", a.BlockSize, b.BlockSize)
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("handshake mismatch, refusing to start: %s", strings.Join(diffs, "; "))
}
