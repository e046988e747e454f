package membership

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"

	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/internal/secretfile"
)

// GossipKeys is a member's gossip keyring: memberlist encrypts and
// authenticates every gossip message with the first key (the primary) and
// accepts a message under any of them, which is what lets a cluster change
// its key without a moment when two members cannot talk (docs/operations.md,
// "Rotating the gossip key"). Each key is 16, 24 or 32 bytes (AES-128,
// AES-192, AES-256). Empty: gossip is in the clear.
//
// GossipKeys formats and logs as the number of keys, never their bytes.
type GossipKeys [][]byte

// String is "none" or "N key(s) [redacted]".
func (k GossipKeys) String() string {
	switch len(k) {
	case 0:
		return "none"
	case 1:
		return "1 key [redacted]"
	}
	return fmt.Sprintf("%d keys [redacted]", len(k))
}

// Format prints String whatever the verb: a key must not end up in a log
// line or an error message by accident.
func (k GossipKeys) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, k.String()) }

// LogValue keeps the keys out of structured logs.
func (k GossipKeys) LogValue() slog.Value { return slog.StringValue(k.String()) }

// validate reports the first key memberlist would refuse, by position.
func (k GossipKeys) validate() error {
	for i, key := range k {
		switch len(key) {
		case 16, 24, 32:
		default:
			return fielderr.New("GossipKeys", "key %d of %d is %d bytes, want 16, 24 or 32", i+1, len(k), len(key))
		}
	}
	return nil
}

// maxKeyringFile bounds what ReadKeyring reads: dozens of keys, far more
// than a rotation needs.
const maxKeyringFile = 4096

// keyHint says how to make a key, for errors about one.
const keyHint = "make one with: head -c 32 /dev/urandom | base64"

// ReadKeyring reads a gossip keyring file: one base64 key per line (16, 24
// or 32 bytes), the first the primary; blank lines and white space around
// a key are ignored. Like the job key's file it must be a regular file
// that only its owner may read or write (secretfile.Read). Errors name the
// file and the line, never a key.
func ReadKeyring(path string) (GossipKeys, error) {
	text, err := secretfile.Read(path, maxKeyringFile)
	if err != nil {
		return nil, err
	}
	keys, err := ParseKeyring(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// ParseKeyring parses a keyring file's text (see ReadKeyring). It holds at
// least one key.
func ParseKeyring(text []byte) (GossipKeys, error) {
	var keys GossipKeys
	for i, line := range bytes.Split(text, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		key, err := base64.StdEncoding.AppendDecode(nil, line)
		if err != nil {
			return nil, fmt.Errorf("line %d: not base64 (%s)", i+1, keyHint)
		}
		if n := len(key); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("line %d: holds %d bytes, want 16, 24 or 32 (%s)", i+1, n, keyHint)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("holds no key (%s)", keyHint)
	}
	return keys, nil
}
