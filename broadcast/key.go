package broadcast

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/tpcoord/tpcoord/internal/secretfile"
)

// KeySize is the length of a job key.
const KeySize = 32

// Key is a job's message key: every Step, Heartbeat and replay message of
// the job carries an HMAC-SHA256 under it, so a process that can publish
// on the job's subjects but does not hold the key (a client, a rank of
// another job) cannot forge one. Only the job's ranks (and its launcher)
// hold it. nil is a job without a key.
//
// A Key formats and logs as "[redacted]", never its bytes.
type Key []byte

// NewKey returns a random key.
func NewKey() (Key, error) {
	k := make(Key, KeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("generate a job key: %w", err)
	}
	return k, nil
}

// Format prints a placeholder whatever the verb: a key must not end up
// in a log line or an error message by accident.
func (k Key) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, k.String()) }

// String is "[redacted]", or "none" for no key.
func (k Key) String() string {
	if len(k) == 0 {
		return "none"
	}
	return "[redacted]"
}

// LogValue keeps the key out of structured logs.
func (k Key) LogValue() slog.Value { return slog.StringValue(k.String()) }

// maxKeyFile bounds what ReadKeyFile reads: the base64 of 32 bytes and
// some white space.
const maxKeyFile = 4096

// ParseKey decodes a key from its base64 text (surrounding white space
// ignored). It must hold exactly KeySize bytes.
func ParseKey(text []byte) (Key, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(text)))
	if err != nil {
		return nil, errors.New("not base64 (make one with: head -c 32 /dev/urandom | base64)")
	}
	if len(k) != KeySize {
		return nil, fmt.Errorf("holds %d bytes, want %d (make one with: head -c 32 /dev/urandom | base64)", len(k), KeySize)
	}
	return k, nil
}

// ReadKeyFile reads a key written as base64 in a regular file that only
// its owner may read or write (secretfile.Read): a file open to the group
// or others is refused, since anyone who can read it can forge the job's
// messages. Errors name the path, never the key.
func ReadKeyFile(path string) (Key, error) {
	text, err := secretfile.Read(path, maxKeyFile)
	if err != nil {
		return nil, err
	}
	k, err := ParseKey(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// WriteKeyFile writes k as base64 to a new file at path, mode 0600. It
// refuses to overwrite an existing file.
func WriteKeyFile(path string, k Key) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.WriteString(f, base64.StdEncoding.EncodeToString(k)+"\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}
