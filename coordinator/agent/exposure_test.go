package agent

import (
	"bytes"
	"encoding/base64"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// TestExposuresRefused: beyond loopback, memberlist needs a gossip key and
// every NATS server credentials; Validate refuses the first exposure
// naming its field, what would fix it and Insecure, and Insecure lets it
// through. Loopback is judged from the text: IP literals and "localhost".
func TestExposuresRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want []string // fields exposed, in order
	}{
		{"defaults", func(*Config) {}, nil},
		{"loopback v4", func(c *Config) { c.Bind = "127.0.0.2:7946" }, nil},
		{"loopback v6", func(c *Config) { c.Bind, c.NATS = "[::1]:7946", "nats://[::1]:4222" }, nil},
		{"localhost NATS", func(c *Config) { c.NATS = "nats://localhost:4222" }, nil},
		{"all interfaces v4", func(c *Config) { c.Bind = "0.0.0.0:7946" }, []string{"Bind"}},
		{"all interfaces v6", func(c *Config) { c.Bind = "[::]:7946" }, []string{"Bind"}},
		{"no host", func(c *Config) { c.Bind = ":7946" }, []string{"Bind"}},
		{"address with a key", func(c *Config) { c.Bind, c.GossipKeyFile = "10.0.0.1:7946", "/etc/tpcoord/gossip.key" }, nil},
		{"remote NATS", func(c *Config) { c.NATS = "nats://10.0.0.9:4222" }, []string{"NATS"}},
		{"remote NATS, token", func(c *Config) { c.NATS = "nats://tok@10.0.0.9:4222" }, nil},
		{"remote NATS, user", func(c *Config) { c.NATS, c.NATSAuth.User = "nats://10.0.0.9:4222", "rank" }, nil},
		{"remote NATS, certificate", func(c *Config) { c.NATS, c.NATSAuth.TLSCert = "tls://10.0.0.9:4222", "/c" }, nil},
		{"two remote NATS, one covered", func(c *Config) { c.NATS = "nats://u:p@10.0.0.9:4222,nats://10.0.0.8:4222" }, []string{"NATS"}},
		{"hosted NATS: Serve's own check", func(c *Config) { c.NATS, c.NATSServe = "nats://10.0.0.9:4222", true }, nil},
		{"both", func(c *Config) { c.Bind, c.NATS = "10.0.0.1:7946", "nats://nats.example:4222" }, []string{"Bind", "NATS"}},
	} {
		c := DefaultConfig()
		tc.edit(&c)
		var got []string
		for _, e := range c.Exposures() {
			got = append(got, e.Field)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: exposures %v, want %v", tc.name, got, tc.want)
		}
		err := c.Validate()
		var fe *fielderr.Error
		switch {
		case len(tc.want) == 0 && err != nil:
			t.Errorf("%s: Validate: %v", tc.name, err)
		case len(tc.want) > 0 && (!errors.As(err, &fe) || fe.Field != tc.want[0] || fe.Override != "Insecure" || len(fe.Fix) == 0):
			t.Errorf("%s: Validate: %v, want an error naming %s, a fix and Insecure", tc.name, err, tc.want[0])
		}
		c.Insecure = true
		if err := c.Validate(); err != nil {
			t.Errorf("%s, insecure: Validate: %v", tc.name, err)
		}
	}
}

// TestBindNameRefused: the member's sockets bind addresses, not names
// ("localhost" too), so Bind takes IP addresses only, whatever the key or
// Insecure say.
func TestBindNameRefused(t *testing.T) {
	for _, bind := range []string{"localhost:7946", "node-a.example:7946"} {
		for _, insecure := range []bool{false, true} {
			c := DefaultConfig()
			c.Bind, c.GossipKeyFile, c.Insecure = bind, "/etc/tpcoord/gossip.key", insecure
			err := c.Validate()
			var fe *fielderr.Error
			if !errors.As(err, &fe) || fe.Field != "Bind" || !strings.Contains(err.Error(), "IP address") {
				t.Errorf("Bind %s, insecure %v: Validate: %v, want a Bind error asking for an IP address", bind, insecure, err)
			}
		}
	}
}

// TestExposureMessages: the refusals say what is open and never show a
// password; the NATS one names every server left uncovered.
func TestExposureMessages(t *testing.T) {
	c := DefaultConfig()
	c.Bind = "0.0.0.0:7946"
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "0.0.0.0:7946 is not a loopback address and there is no gossip key") ||
		!strings.Contains(err.Error(), "unencrypted") || !strings.Contains(err.Error(), "give GossipKeyFile; or Insecure to accept the risk") {
		t.Errorf("bind refusal: %v", err)
	}
	c = DefaultConfig()
	c.NATS = "nats://rank:s3cret@10.0.0.1:4222,nats://10.0.0.2:4222,nats://nats.example:4222"
	err = c.Validate()
	if err == nil || !strings.Contains(err.Error(), "NATS: nats://10.0.0.2:4222, nats://nats.example:4222: not on loopback") ||
		!strings.Contains(err.Error(), "NATSAuth.User") || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "10.0.0.1") {
		t.Errorf("NATS refusal: %v", err)
	}
	if err := (&Config{Bind: "7946"}).validateExposure(); err == nil || !strings.Contains(err.Error(), `"7946" is not host:port`) {
		t.Errorf("unparsable bind: %v", err)
	}
}

// lockedBuffer is a log sink for several goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestInsecureWarnsOnce: an insecure configuration that is let through
// runs, and each agent logs one warning naming everything exposed.
func TestInsecureWarnsOnce(t *testing.T) {
	var logs lockedBuffer
	j := newJob(t, 2, func(c *Config) {
		// The job runs on the in-process network and hub; the addresses
		// are only judged.
		c.Bind, c.NATS, c.Insecure = "0.0.0.0:7946", "nats://10.0.0.9:4222", true
	})
	j.log = slog.New(slog.NewTextHandler(&logs, nil))
	ms := j.startWorld()
	if _, err := j.generate(3, 10).wait(t); err != nil {
		t.Fatal(err)
	}
	j.stopAll()
	for _, m := range ms {
		if err := m.wait(t); err != nil {
			t.Errorf("rank %d: %v", m.rank, err)
		}
	}
	var warnings []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "insecure configuration accepted") {
			warnings = append(warnings, line)
		}
	}
	if len(warnings) != 2 {
		t.Fatalf("%d warnings from 2 agents, want one each:\n%s", len(warnings), strings.Join(warnings, "\n"))
	}
	for _, w := range warnings {
		if !strings.Contains(w, "level=WARN") || !strings.Contains(w, "Bind: 0.0.0.0:7946") || !strings.Contains(w, "NATS: nats://10.0.0.9:4222: not on loopback") {
			t.Errorf("warning does not name both exposures: %s", w)
		}
	}
}

// writeGossipKeys writes a keyring of the given keys with mode 0600.
func writeGossipKeys(t *testing.T, keys ...[]byte) string {
	t.Helper()
	var text strings.Builder
	for _, k := range keys {
		text.WriteString(base64.StdEncoding.EncodeToString(k) + "\n")
	}
	path := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(path, []byte(text.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGossipKeyedJob: ranks with a gossip keyring (bound beyond loopback,
// so Validate requires it) form and decode; a keyring file open to others
// stops Run at once, naming GossipKeyFile.
func TestGossipKeyedJob(t *testing.T) {
	path := writeGossipKeys(t, bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16))
	j := newJob(t, 2, func(c *Config) { c.Bind, c.GossipKeyFile = "10.0.0.1:7946", path })
	j.startWorld()
	if rep, err := j.generate(4, 12).wait(t); err != nil || len(rep.Tokens) != 12 {
		t.Fatalf("request: %v, %d tokens", err, tokens(rep))
	}
	open := writeGossipKeys(t, bytes.Repeat([]byte{1}, 32))
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := newJob(t, 1, func(c *Config) { c.GossipKeyFile = open })
	var fe *fielderr.Error
	if err := bad.start(0, "", nil).wait(t); !errors.As(err, &fe) || fe.Field != "GossipKeyFile" || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a keyring open to others: Run returned %v, want an error naming GossipKeyFile", err)
	}
}
