package agent

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/internal/poll"
	"github.com/tpcoord/tpcoord/rank"
)

// writeJobKey writes a new key to a 0600 file and returns both.
func writeJobKey(t *testing.T) (broadcast.Key, string) {
	t.Helper()
	key, err := broadcast.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "job.key")
	if err := broadcast.WriteKeyFile(path, key); err != nil {
		t.Fatal(err)
	}
	return key, path
}

// sealCheck verifies every binary message on the bus under a job's key:
// each must verify under it and not under another key.
type sealCheck struct {
	mu       sync.Mutex
	seen     map[string]int
	problems error
}

func watchSeals(t *testing.T, j *job, key broadcast.Key) *sealCheck {
	t.Helper()
	other, err := broadcast.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	own, forger := broadcast.NewCodec(broadcast.JobHash(j.subj.Job), key), broadcast.NewCodec(broadcast.JobHash(j.subj.Job), other)
	c := &sealCheck{seen: map[string]int{}}
	conn := j.hub.Connect()
	t.Cleanup(conn.Close)
	check := func(kind string, decode func(*broadcast.Codec, []byte) error) func(*broadcast.Msg) {
		return func(m *broadcast.Msg) {
			err := decode(own, m.Data)
			if ferr := decode(forger, m.Data); err == nil && !errors.Is(ferr, broadcast.ErrMAC) {
				err = errors.New("verifies under another key")
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			c.seen[kind]++
			if err != nil {
				c.problems = errors.Join(c.problems, errors.New(kind+": "+err.Error()))
			}
		}
	}
	for subject, fn := range map[string]func(*broadcast.Msg){
		j.subj.Step(): check("step", func(c *broadcast.Codec, b []byte) error { var s broadcast.Step; return c.DecodeStep(b, &s) }),
		j.subj.Heartbeats(): check("heartbeat", func(c *broadcast.Codec, b []byte) error {
			var h broadcast.Heartbeat
			return c.DecodeHeartbeat(b, &h)
		}),
	} {
		if _, err := conn.Subscribe(subject, fn); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestKeyedJob: a job whose ranks share a job key file decodes in
// lockstep; every step and heartbeat on the bus is sealed with the key,
// and no rank refuses anything.
func TestKeyedJob(t *testing.T) {
	key, path := writeJobKey(t)
	j := newJob(t, 3, func(c *Config) { c.JobKeyFile = path })
	seals := watchSeals(t, j, key)
	ms := j.startWorld()
	rep, err := j.generate(5, 40).wait(t)
	if err != nil || len(rep.Tokens) != 40 {
		t.Fatalf("request: %v, %d tokens; want 40", err, tokens(rep))
	}
	j.digestsAgree(ms...)
	for _, m := range ms {
		if st := m.a.Status(); len(st.Rejected) > 0 {
			t.Errorf("rank %d refused messages: %v", m.rank, st.Rejected)
		}
	}
	seals.mu.Lock()
	defer seals.mu.Unlock()
	if seals.problems != nil || seals.seen["step"] < 40 || seals.seen["heartbeat"] == 0 {
		t.Fatalf("%v messages seen; %v", seals.seen, seals.problems)
	}
}

// TestJobKeyFileRefused: Run stops at once with an error naming
// JobKeyFile when the file is open to others or holds no key.
func TestJobKeyFileRefused(t *testing.T) {
	_, good := writeJobKey(t)
	if err := os.Chmod(good, 0o644); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(t.TempDir(), "short.key")
	if err := os.WriteFile(short, []byte("AAECAwQFBgcICQoLDA0ODw==\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{good, short} {
		j := newJob(t, 1, func(c *Config) { c.JobKeyFile = path })
		var fe *fielderr.Error
		if err := j.start(0, "", nil).wait(t); !errors.As(err, &fe) || fe.Field != "JobKeyFile" {
			t.Errorf("%s: Run returned %v, want an error naming JobKeyFile", path, err)
		}
	}
}

// TestMismatchedJobKeys: ranks holding different keys agree at rendezvous
// (only whether there is a key is in the digest) but refuse each other's
// every message as "mac": neither hears the other, and the job stops with
// a lost peer.
func TestMismatchedJobKeys(t *testing.T) {
	_, path0 := writeJobKey(t)
	_, path1 := writeJobKey(t)
	j := newJob(t, 2, func(c *Config) {
		c.JobKeyFile = path0
		if c.Rank == 1 {
			c.JobKeyFile = path1
		}
	})
	m0 := j.start(0, "", nil)
	m1 := j.start(1, "", []string{m0.addr})
	poll.Until(t, 60*time.Second, "both ranks counting refused MACs", func() bool {
		return m0.a.Status().Rejected["mac"] > 0 && m1.a.Status().Rejected["mac"] > 0
	})
	for _, m := range []*member{m0, m1} {
		if err := m.wait(t); !errors.Is(err, rank.ErrPeerLost) {
			t.Errorf("rank %d: Run returned %v, want a lost peer", m.rank, err)
		}
	}
}
