package worker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unsafe"

	"github.com/tpcoord/tpcoord/internal/f16"
	"github.com/tpcoord/tpcoord/rank"
	"github.com/tpcoord/tpcoord/sampler"
)

// The worker protocol (docs/worker-protocol.md): length-prefixed binary
// frames over a Unix stream socket, every integer little-endian. Logits do
// not travel on the socket: the worker writes them into a shared-memory file
// the agent created, in the host's native byte order.

// ProtocolVersion is the version HELLO carries; both sides must agree.
const ProtocolVersion = 1

// Frame types.
const (
	frameHello     uint16 = 1 // agent → worker
	frameHelloOK   uint16 = 2 // worker → agent
	frameForward   uint16 = 3 // agent → worker
	frameForwardOK uint16 = 4 // worker → agent
	frameError     uint16 = 5 // worker → agent, in place of HELLO_OK or FORWARD_OK
	frameShutdown  uint16 = 6 // agent → worker, no reply
)

const (
	frameHeaderSize = 8
	// maxReplyBody bounds what the agent reads from a worker: replies are
	// small, so a larger length is garbage, not a reason to allocate.
	maxReplyBody = 64 << 10
	// maxRequestBody bounds what a worker reads from the agent (FORWARD
	// carries every row's token history).
	maxRequestBody   = 256 << 20
	helloFixedSize   = 38
	helloOKFixedSize = 34
	forwardOKSize    = 12
)

// Byte orders as HELLO states them.
const (
	orderLittle uint8 = 1
	orderBig    uint8 = 2
)

// DType is the element type of the logits the worker writes.
type DType uint8

// Wire codes of the logits element types.
const (
	Float32  DType = 1
	Float16  DType = 2
	BFloat16 DType = 3
)

func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float16:
		return "float16"
	case BFloat16:
		return "bfloat16"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the element size in bytes (0 for an unknown type).
func (d DType) Size() int {
	switch d {
	case Float32:
		return 4
	case Float16, BFloat16:
		return 2
	}
	return 0
}

// ParseDType accepts float32, float16 and bfloat16 (and f32, f16, bf16).
func ParseDType(s string) (DType, error) {
	d, err := sampler.ParseDtype(s)
	if err != nil {
		return 0, err
	}
	switch d {
	case sampler.Float16:
		return Float16, nil
	case sampler.BFloat16:
		return BFloat16, nil
	}
	return Float32, nil
}

// nativeOrder is this host's byte order, as HELLO states it.
var nativeOrder = func() uint8 {
	x := uint16(1)
	if *(*byte)(unsafe.Pointer(&x)) == 1 {
		return orderLittle
	}
	return orderBig
}()

func orderName(o uint8) string {
	switch o {
	case orderLittle:
		return "little-endian"
	case orderBig:
		return "big-endian"
	}
	return fmt.Sprintf("byte-order(%d)", o)
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
}

func appendFrame(dst []byte, typ uint16, body []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(body)))
	dst = binary.LittleEndian.AppendUint16(dst, typ)
	dst = binary.LittleEndian.AppendUint16(dst, 0)
	return append(dst, body...)
}

// beginFrame appends a header whose length is patched by endFrame.
func beginFrame(dst []byte, typ uint16) ([]byte, int) {
	at := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	dst = binary.LittleEndian.AppendUint16(dst, typ)
	dst = binary.LittleEndian.AppendUint16(dst, 0)
	return dst, at
}

func endFrame(dst []byte, at int) []byte {
	binary.LittleEndian.PutUint32(dst[at:], uint32(len(dst)-at-frameHeaderSize))
	return dst
}

// errGarbage marks a frame that does not follow the protocol.
var errGarbage = errors.New("not a worker protocol frame")

// readFrame reads one frame into buf (grown as needed) and returns its type
// and body. A body longer than max is refused before it is read.
func readFrame(r io.Reader, buf []byte, max int) (uint16, []byte, error) {
	var h [frameHeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, buf, err
	}
	n := binary.LittleEndian.Uint32(h[0:])
	typ := binary.LittleEndian.Uint16(h[4:])
	if flags := binary.LittleEndian.Uint16(h[6:]); flags != 0 || typ < frameHello || typ > frameShutdown {
		return 0, buf, fmt.Errorf("%w: header % x (type %d, reserved %d)", errGarbage, h[:], typ, flags)
	}
	if uint64(n) > uint64(max) {
		return 0, buf, fmt.Errorf("%w: %s frame of %d bytes (at most %d)", errGarbage, frameName(typ), n, max)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, buf, err
	}
	return typ, buf, nil
}

func frameName(t uint16) string {
	switch t {
	case frameHello:
		return "HELLO"
	case frameHelloOK:
		return "HELLO_OK"
	case frameForward:
		return "FORWARD"
	case frameForwardOK:
		return "FORWARD_OK"
	case frameError:
		return "ERROR"
	case frameShutdown:
		return "SHUTDOWN"
	}
	return fmt.Sprintf("frame type %d", t)
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
	if len(b) != helloOKFixedSize+n {
		return fmt.Errorf("%w: HELLO_OK of %d bytes with a %d-byte name", errGarbage, len(b), n)
	}
	h.Name = string(b[helloOKFixedSize:])
	return nil
}

// appendForward encodes FORWARD: the step and every row's full history.
func appendForward(dst []byte, step uint64, rows []*rank.Seq) []byte {
	dst, at := beginFrame(dst, frameForward)
	dst = binary.LittleEndian.AppendUint64(dst, step)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(rows)))
	for _, r := range rows {
		dst = binary.LittleEndian.AppendUint64(dst, r.ID)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Prompt)))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Output)))
		dst = appendTokens(dst, r.Prompt)
		dst = appendTokens(dst, r.Output)
	}
	return endFrame(dst, at)
}

func appendTokens(dst []byte, toks []int32) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, 4*len(toks))...)
	b := dst[n:]
	for i, t := range toks {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(t))
	}
	return dst
}

// decodeForward decodes FORWARD into rows, reusing their storage.
func decodeForward(b []byte, rows []rank.Seq) (uint64, []rank.Seq, error) {
	if len(b) < 12 {
		return 0, rows, fmt.Errorf("%w: FORWARD of %d bytes", errGarbage, len(b))
	}
	step := binary.LittleEndian.Uint64(b)
	n := binary.LittleEndian.Uint32(b[8:])
	b = b[12:]
	if uint64(n)*16 > uint64(len(b)) {
		return 0, rows, fmt.Errorf("%w: FORWARD claims %d rows in %d bytes", errGarbage, n, len(b))
	}
	rows = rows[:0]
	for i := uint32(0); i < n; i++ {
		if len(b) < 16 {
			return 0, rows, fmt.Errorf("%w: FORWARD row %d truncated", errGarbage, i)
		}
		id := binary.LittleEndian.Uint64(b)
		np, no := uint64(binary.LittleEndian.Uint32(b[8:])), uint64(binary.LittleEndian.Uint32(b[12:]))
		b = b[16:]
		if (np+no)*4 > uint64(len(b)) {
			return 0, rows, fmt.Errorf("%w: FORWARD row %d claims %d tokens in %d bytes", errGarbage, i, np+no, len(b))
		}
		if len(rows) < cap(rows) {
			rows = rows[:len(rows)+1]
		} else {
			rows = append(rows, rank.Seq{})
		}
		r := &rows[len(rows)-1]
		r.ID = id
		r.Prompt = decodeTokens(r.Prompt[:0], b[:4*np])
		r.Output = decodeTokens(r.Output[:0], b[4*np:4*(np+no)])
		b = b[4*(np+no):]
	}
	if len(b) != 0 {
		return 0, rows, fmt.Errorf("%w: FORWARD has %d trailing bytes", errGarbage, len(b))
	}
	return step, rows, nil
}

func decodeTokens(dst []int32, b []byte) []int32 {
	for i := 0; i < len(b); i += 4 {
		dst = append(dst, int32(binary.LittleEndian.Uint32(b[i:])))
	}
	return dst
}

func appendForwardOK(dst []byte, step uint64, rows uint32) []byte {
	dst, at := beginFrame(dst, frameForwardOK)
	dst = binary.LittleEndian.AppendUint64(dst, step)
	dst = binary.LittleEndian.AppendUint32(dst, rows)
	return endFrame(dst, at)
}

func appendError(dst []byte, msg string) []byte {
	if len(msg) > maxReplyBody {
		msg = msg[:maxReplyBody]
	}
	return appendFrame(dst, frameError, []byte(msg))
}

// workerMessage renders a worker's ERROR text for an error message: quoted
// and bounded, since it comes from another process.
func workerMessage(b []byte) string {
	const limit = 512
	s := string(b)
	if len(s) > limit {
		s = s[:limit] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// widen converts native-order 16-bit logits from src into dst (len(dst)
// elements; exact).
func widen(dst []float32, src []uint16, dt DType) {
	if dt == BFloat16 {
		f16.WidenBFloat16(dst, src)
		return
	}
	f16.WidenHalf(dst, src)
}

// narrow rounds float32 logits to dt (ties to even), for workers.
func narrow(dst []uint16, src []float32, dt DType) {
	if dt == BFloat16 {
		f16.NarrowBFloat16(dst, src)
		return
	}
	f16.NarrowHalf(dst, src)
}

func leUint64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
func leUint32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
