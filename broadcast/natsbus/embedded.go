package natsbus

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
)

// MaxPayload is the largest message an embedded server accepts (8 MiB).
const MaxPayload = 8 << 20

// Rank and client user names of a job's embedded server.
const (
	RankUser   = "rank"
	ClientUser = "client"
)

// Server is a NATS server embedded in this process: the single-machine
// default, hosted by launch, or by rank 0 (agent --nats-serve), whose step
// messages then reach it through an in-process pipe (Config.InProcess)
// instead of a socket and a wake-up of another process. Everyone else
// connects over TCP as to any server. Serve, ServeJob and their loopback
// forms start one (serve.go, access.go); the agent-only build has none
// (HasServer).
type Server struct {
	srv       embedded
	url       string
	clientURL string // ServeJob: the clients' credentials
}

// embedded is what Server uses of the NATS server (nats-server's
// *server.Server).
type embedded interface {
	InProcessConn() (net.Conn, error)
	NumClients() int
	Shutdown()
	WaitForShutdown()
}

// URL is the URL clients connect to; it carries the credentials.
func (s *Server) URL() string { return s.url }

// ClientURL is the URL the job's clients connect with (ServeJob); for a
// server with one set of credentials it is URL.
func (s *Server) ClientURL() string {
	if s.clientURL == "" {
		return s.url
	}
	return s.clientURL
}

// NumClients is the number of client connections, in-process ones
// included.
func (s *Server) NumClients() int { return s.srv.NumClients() }

// Close shuts the server down and waits until it has.
func (s *Server) Close() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}

// NewToken returns a random 128-bit token, hex-encoded.
func NewToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// JobURLs returns the rank and client URLs of a job's server at host:port,
// each with a random password.
func JobURLs(hostPort string) (rankURL, clientURL string, err error) {
	var urls [2]string
	for i, user := range []string{RankUser, ClientUser} {
		pw, err := NewToken()
		if err != nil {
			return "", "", err
		}
		u := url.URL{Scheme: "nats", User: url.UserPassword(user, pw), Host: hostPort}
		urls[i] = u.String()
	}
	return urls[0], urls[1], nil
}
