package fanout

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tpcoord/tpcoord/broadcast"
)

// Wire format of one benchmark message, shared by both transports: the
// sequence number and the publisher's wall-clock send time
// (time.Now().UnixNano(), comparable across processes on one machine),
// little-endian, then zero padding up to the payload size. With a key
// (--mac) the last broadcast.MACSize bytes are the MAC of the bytes before
// them, as the job's messages carry one. Over TCP each message is preceded
// by its length as a little-endian uint32.
const (
	headerLen  = 16
	minPayload = headerLen
	maxPayload = 1 << 20
	// endSeq marks the message that tells a follower the run is over.
	endSeq = math.MaxUint64
)

// macCodec is what seals (publisher) or verifies (follower) the messages'
// MAC under the key in keyFile; nil without one.
func macCodec(keyFile string) (*broadcast.Codec, error) {
	if keyFile == "" {
		return nil, nil
	}
	key, err := broadcast.ReadKeyFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("--job-key-file: %w", err)
	}
	return broadcast.NewCodec(0, key), nil
}

// putHeader writes seq and the send time sentAt (Unix ns) into msg, which
// holds at least headerLen bytes.
func putHeader(msg []byte, seq uint64, sentAt int64) {
	binary.LittleEndian.PutUint64(msg, seq)
	binary.LittleEndian.PutUint64(msg[8:], uint64(sentAt))
}

// header reads what putHeader wrote; ok is false for a message too short
// to hold it.
func header(msg []byte) (seq uint64, sentAt int64, ok bool) {
	if len(msg) < headerLen {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(msg), int64(binary.LittleEndian.Uint64(msg[8:])), true
}
