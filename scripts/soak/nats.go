package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/internal/freeport"
)

// The users of configs/nats/nats-server.conf: rank 0 (the only one that
// may publish steps and control messages), the other ranks, the clients.
var natsUsers = []string{"rank0", "rank", "client"}

// The job name the shipped configuration is written for.
const shippedJob = "llm-granite"

// natsServer is Debian's nats-server running the shipped configuration,
// with the soak's job, random passwords, and a free loopback port.
type natsServer struct {
	port int
	pw   map[string]string
	p    *proc
}

// renderNATSConf adapts the shipped configuration: listen on port of the
// loopback, the job's subjects, and the given passwords. Every
// placeholder must be there, or the soak would not test what it says.
func renderNATSConf(tmpl, job string, port int, pw map[string]string) (string, error) {
	listen := regexp.MustCompile(`(?m)^listen:.*$`)
	if !listen.MatchString(tmpl) {
		return "", fmt.Errorf("the NATS configuration has no top-level listen: line")
	}
	conf := listen.ReplaceAllString(tmpl, fmt.Sprintf("listen: 127.0.0.1:%d", port))
	if !strings.Contains(conf, shippedJob) {
		return "", fmt.Errorf("the NATS configuration names no job %q", shippedJob)
	}
	conf = strings.ReplaceAll(conf, shippedJob, job)
	for _, u := range natsUsers {
		ph := "CHANGE-ME-" + u + `"`
		if !strings.Contains(conf, ph) {
			return "", fmt.Errorf("the NATS configuration has no password placeholder for user %s", u)
		}
		conf = strings.ReplaceAll(conf, ph, pw[u]+`"`)
	}
	return conf, nil
}

func newNATSServer(dir, tmplPath, job, name string, ev *eventLog) (*natsServer, error) {
	tmpl, err := os.ReadFile(tmplPath)
	if err != nil {
		return nil, err
	}
	port, err := freeport.Pick("127.0.0.1", true)
	if err != nil {
		return nil, err
	}
	s := &natsServer{port: port, pw: map[string]string{}}
	for _, u := range natsUsers {
		if s.pw[u], err = randomHex(16); err != nil {
			return nil, err
		}
	}
	conf, err := renderNATSConf(string(tmpl), job, port, s.pw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tmplPath, err)
	}
	confPath := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	s.p = newProc(name, natsServerBin, []string{"-c", confPath}, os.Environ(), filepath.Join(dir, "nats.log"), ev, restartDelay)
	return s, nil
}

// natsServerBin is Debian's package's binary (scripts/deps.sh installs it).
const natsServerBin = "/usr/sbin/nats-server"

// url is the server's URL with user's credentials.
func (s *natsServer) url(user string) string {
	return fmt.Sprintf("nats://%s:%s@127.0.0.1:%d", user, s.pw[user], s.port)
}

// waitUp waits until the server accepts the clients' user.
func (s *natsServer) waitUp(ctx context.Context, limit time.Duration) error {
	c, err := natsbus.ConnectWait(ctx, natsbus.Config{URL: s.url("client"), Name: "soak-probe"}, limit)
	if err != nil {
		return fmt.Errorf("nats-server on port %d: %w", s.port, err)
	}
	c.Close()
	return nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// clientBus is a client connection that is made again if nats.go gave up
// on it (a server down for longer than its reconnect attempts).
type clientBus struct {
	url, name string

	mu sync.Mutex
	c  *natsbus.Conn
}

func (b *clientBus) get(ctx context.Context) (*natsbus.Conn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c != nil && !b.c.NATS().IsClosed() {
		return b.c, nil
	}
	c, err := natsbus.ConnectWait(ctx, natsbus.Config{URL: b.url, Name: b.name}, 30*time.Second)
	if err != nil {
		return nil, err
	}
	b.c = c
	return c, nil
}

func (b *clientBus) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c != nil {
		b.c.Close()
	}
}
