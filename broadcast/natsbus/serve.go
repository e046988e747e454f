//go:build !agentonly

package natsbus

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/tpcoord/tpcoord/internal/loopback"
)

// HasServer reports whether this build embeds the NATS server: the
// agent-only build (-tags agentonly, tpcoord-agent) does not.
const HasServer = true

// Serve starts a server where rawURL says: nats://[TOKEN@]HOST:PORT or
// nats://USER:PASSWORD@HOST:PORT. Clients must present the URL's token or
// user and password. Port 0 picks a free port (URL reports it). A server on
// a non-loopback address must have credentials: a bus anyone on the network
// can publish steps to is refused.
func Serve(rawURL string) (*Server, error) {
	u, opts, err := serverOptions(rawURL)
	if err != nil {
		return nil, err
	}
	return start(u, opts)
}

// start starts a server with opts, listening where u says, and returns it
// with u's credentials and the port it got.
func start(u *url.URL, opts *server.Options) (*Server, error) {
	if opts.Port != server.RANDOM_PORT {
		// The server would only log a listen error and never become ready;
		// try the address first for a clear error now.
		ln, err := net.Listen("tcp", u.Host)
		if err != nil {
			return nil, fmt.Errorf("nats-serve: %w", err)
		}
		ln.Close()
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats-serve: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("nats-serve: cannot listen on %s (port in use?)", u.Host)
	}
	addr, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		srv.Shutdown()
		return nil, fmt.Errorf("nats-serve: no TCP listener on %s", u.Host)
	}
	u.Host = net.JoinHostPort(opts.Host, strconv.Itoa(addr.Port))
	return &Server{srv: srv, url: u.String()}, nil
}

// serverOptions parses and checks Serve's URL into the server's options
// (port 0 becomes server.RANDOM_PORT); its errors never show the secret.
func serverOptions(rawURL string) (*url.URL, *server.Options, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error's text repeats the URL, secret and all
		}
		return nil, nil, fmt.Errorf("nats-serve: %s is not a URL: %w", Redact(rawURL), err)
	}
	if u.Scheme != "nats" {
		return nil, nil, fmt.Errorf("nats-serve: %s: scheme must be nats://", Redact(rawURL))
	}
	host, portStr := u.Hostname(), u.Port()
	port, err := strconv.Atoi(portStr)
	if host == "" || err != nil || port < 0 || port > 65535 {
		return nil, nil, fmt.Errorf("nats-serve: %s: give host and port, e.g. nats://TOKEN@127.0.0.1:4222", Redact(rawURL))
	}
	if u.Path != "" && u.Path != "/" {
		return nil, nil, fmt.Errorf("nats-serve: %s: a server URL has no path", Redact(rawURL))
	}
	opts := &server.Options{Host: host, Port: port, NoSigs: true, NoLog: true, MaxPayload: MaxPayload}
	if port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	switch pw, hasPW := u.User.Password(); {
	case u.User == nil:
		if !loopback.Host(host) {
			return nil, nil, fmt.Errorf("nats-serve: %s listens beyond loopback without credentials; put a token in the URL (nats://TOKEN@%s)", Redact(rawURL), u.Host)
		}
	case u.User.Username() == "" || (hasPW && pw == ""):
		// The server turns auth on only for a non-empty user or token: an
		// empty one would silently leave the bus open.
		return nil, nil, fmt.Errorf("nats-serve: %s: empty token, user or password", Redact(rawURL))
	case hasPW:
		opts.Username, opts.Password = u.User.Username(), pw
	default:
		opts.Authorization = u.User.Username()
	}
	return u, opts, nil
}

// ServeLoopback starts a server on 127.0.0.1 with a free port and a
// random token.
func ServeLoopback() (*Server, error) {
	tok, err := NewToken()
	if err != nil {
		return nil, err
	}
	return Serve("nats://" + tok + "@127.0.0.1:0")
}
