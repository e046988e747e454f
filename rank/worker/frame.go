package worker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The worker protocol (docs/worker-protocol.md): length-prefixed binary
// frames over a Unix stream socket, every integer little-endian. Logits do
// not travel on the socket: the worker writes them into a shared-memory file
// the agent created, in the host's native byte order.

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
	helloOKKVSize    = 12 // version 3: block size, blocks, max model len
	forwardOKSize    = 12
)

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
// and body. A body longer than maxBody is refused before it is read.
func readFrame(r io.Reader, buf []byte, maxBody int) (uint16, []byte, error) {
	var h [frameHeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, buf, err
	}
	n := binary.LittleEndian.Uint32(h[0:])
	typ := binary.LittleEndian.Uint16(h[4:])
	if flags := binary.LittleEndian.Uint16(h[6:]); flags != 0 || typ < frameHello || typ > frameShutdown {
		return 0, buf, fmt.Errorf("%w: header % x (type %d, reserved %d)", errGarbage, h[:], typ, flags)
	}
	if uint64(n) > uint64(maxBody) {
		return 0, buf, fmt.Errorf("%w: %s frame of %d bytes (at most %d)", errGarbage, frameName(typ), n, maxBody)
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

func leUint64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
func leUint32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
