package membership

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/internal/poll"
)

// testKey is a fixed key of n bytes whose every byte is b.
func testKey(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

func b64(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

// TestParseKeyring: one key or several, 16, 24 or 32 bytes, blank lines
// and CRLF ignored, the first is the primary; bad lines are named by
// number, an empty file is refused, no error shows a key.
func TestParseKeyring(t *testing.T) {
	k1, k2, k3 := testKey(1, 32), testKey(2, 16), testKey(3, 24)
	got, err := ParseKeyring([]byte("\n  " + b64(k1) + "\r\n\n" + b64(k2) + "\n" + b64(k3)))
	if err != nil || len(got) != 3 || !bytes.Equal(got[0], k1) || !bytes.Equal(got[1], k2) || !bytes.Equal(got[2], k3) {
		t.Fatalf("three keys: %d keys, %v", len(got), err)
	}
	for _, tc := range []struct {
		name, text, want string
	}{
		{"empty", "", "holds no key"},
		{"blank lines only", "\n \n", "holds no key"},
		{"not base64", b64(k1) + "\nnot a key!\n", "line 2: not base64"},
		{"wrong length", b64(k1) + "\n\n" + b64(testKey(4, 20)) + "\n", "line 3: holds 20 bytes, want 16, 24 or 32"},
		{"two keys on a line", b64(k1) + " " + b64(k2), "line 1: not base64"},
	} {
		_, err := ParseKeyring([]byte(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "head -c 32 /dev/urandom | base64") {
			t.Errorf("%s: err = %v, want it to say %q and how to make a key", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), b64(k1)) {
			t.Errorf("%s: the error shows a key: %v", tc.name, err)
		}
	}
}

// TestReadKeyring: the file rules of the job key (owner only, regular
// file); errors name the file.
func TestReadKeyring(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gossip.key")
	text := b64(testKey(1, 32)) + "\n" + b64(testKey(2, 32)) + "\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if keys, err := ReadKeyring(path); err != nil || len(keys) != 2 {
		t.Fatalf("0600 keyring: %v, %v", keys, err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadKeyring(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("group-readable keyring: err = %v", err)
	}
	bad := filepath.Join(dir, "bad.key")
	if err := os.WriteFile(bad, []byte(b64(testKey(1, 32))+"\n%%%\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadKeyring(bad); err == nil || !strings.Contains(err.Error(), bad+": line 2: not base64") {
		t.Errorf("bad line: err = %v, want it to name the file and the line", err)
	}
}

// TestGossipKeysNeverPrinted: a keyring prints as its size whatever the
// verb or logger.
func TestGossipKeysNeverPrinted(t *testing.T) {
	keys := GossipKeys{testKey('A', 16), testKey('B', 16)}
	var out strings.Builder
	for _, verb := range []string{"%v", "%s", "%x", "%q", "%#v", "%+v"} {
		fmt.Fprintf(&out, verb+"\n", keys)
		fmt.Fprintf(&out, verb+"\n", Config{GossipKeys: keys})
	}
	slog.New(slog.NewJSONHandler(&out, nil)).Info("x", "keys", keys)
	for _, secret := range []string{"AAAA", "4141", b64(keys[0]), "65 65"} {
		if strings.Contains(out.String(), secret) {
			t.Fatalf("a key's bytes (%q) were printed:\n%s", secret, out.String())
		}
	}
	if !strings.Contains(out.String(), "2 keys [redacted]") || GossipKeys(nil).String() != "none" {
		t.Fatalf("no placeholder:\n%s", out.String())
	}
}

func withKeys(keys ...[]byte) func(*Config) {
	return func(c *Config) { c.GossipKeys = keys }
}

// TestGossipKeyMismatchKeepsApart: over real sockets on loopback, members
// that cannot read each other's gossip do not form a world: different
// keys, a key against none, and the two orders of a rotation that skip a
// step (a new primary before every member holds it; an old primary after
// a member dropped it). The joiner's rendezvous times out; where the first
// member cannot read the joiner at all, it never lists it either.
func TestGossipKeyMismatchKeepsApart(t *testing.T) {
	k1, k2 := testKey(1, 32), testKey(2, 32)
	for _, tc := range []struct {
		name     string
		first    [][]byte
		joiner   [][]byte
		firstSee bool // the first member may read the joiner's (but not vice versa)
	}{
		{"different keys", [][]byte{k1}, [][]byte{k2}, false},
		{"key against none", [][]byte{k1}, nil, false},
		{"none against key", nil, [][]byte{k1}, false},
		{"new primary not yet everywhere", [][]byte{k2, k1}, [][]byte{k1}, true},
		{"old primary already dropped", [][]byte{k1, k2}, [][]byte{k2}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := startWith(t, 0, nil, withKeys(tc.first...), withWorld(2))
			b := startWith(t, 1, []string{a.Addr()}, withKeys(tc.joiner...), withWorld(2))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if r := <-rendezvous(ctx, b); !errors.Is(r.err, ErrRendezvousTimeout) {
				t.Fatalf("joiner's rendezvous: %v (members %v), want ErrRendezvousTimeout", r.err, ranks(r.members))
			}
			if got := ranks(b.Members()); !slices.Equal(got, []int{1}) {
				t.Errorf("joiner lists ranks %v, want only itself", got)
			}
			if got := ranks(a.Members()); !tc.firstSee && !slices.Equal(got, []int{0}) {
				t.Errorf("first member lists ranks %v, want only itself", got)
			}
		})
	}
}

// TestGossipKeyRotation follows docs/operations.md's rotation over real
// sockets on loopback: a world of three on key k1 restarts one member at a
// time with k1 and k2 (k1 primary), then k2 and k1 (k2 primary), then k2
// alone; after every restart the world of three forms again, members on
// the old and new files side by side.
func TestGossipKeyRotation(t *testing.T) {
	k1, k2 := testKey(1, 32), testKey(2, 32)
	members := formWorldWith(t, withKeys(k1))
	for _, phase := range []struct {
		name string
		keys [][]byte
	}{
		{"add k2 second", [][]byte{k1, k2}},
		{"make k2 primary", [][]byte{k2, k1}},
		{"drop k1", [][]byte{k2}},
	} {
		for r := range members {
			members[r] = restartWith(t, members, r, withKeys(phase.keys...))
			for i, m := range members {
				poll.Until(t, 30*time.Second, fmt.Sprintf("%s: rank %d restarted; rank %d sees all three", phase.name, r, i), func() bool {
					return sameMembers(m.Members(), members)
				})
			}
		}
	}
}

// restartWith stops members[r] (leaving) and starts its rank again with
// cfg, joining the others; it returns the new member once its rendezvous
// completed.
func restartWith(t *testing.T, members []*member, r int, cfg func(*Config)) *member {
	t.Helper()
	members[r].leave(t)
	var join []string
	for i, m := range members {
		if i != r {
			join = append(join, m.Addr())
		}
	}
	m := startWith(t, r, join, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if res := <-rendezvous(ctx, m); res.err != nil {
		t.Fatalf("rank %d restarted: %v", r, res.err)
	}
	return m
}

// sameMembers reports whether got lists exactly want's members.
func sameMembers(got []Member, want []*member) bool {
	if len(got) != len(want) {
		return false
	}
	for i, m := range want {
		if got[i].Name != m.Name() {
			return false
		}
	}
	return true
}
