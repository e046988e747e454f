package serve

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
)

// rawSender streams /v1/completions over HTTP/1.1 written and read by
// hand on the caller's goroutine: one keep-alive connection per client,
// the request in one write, the response read straight off the socket.
// net/http's client hands each request to a write loop and each response
// to a read loop, two goroutine wake-ups per request that belong to that
// client, not to the gateway; this client has none, as the NATS path's
// has none beyond its connection's reader.
type rawSender struct {
	addr  string // host:port
	path  string // the completions path, /v1/completions
	model string
	idle  chan *rawConn // kept-alive connections
}

type rawConn struct {
	c  net.Conn
	br *bufio.Reader
}

func newRawSender(base, model string, clients int) (*rawSender, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("raw HTTP client: %q is not an http:// URL", base)
	}
	return &rawSender{addr: u.Host, path: strings.TrimSuffix(u.Path, "/") + "/completions", model: model,
		idle: make(chan *rawConn, clients)}, nil
}

func (*rawSender) name() string { return PathHTTP }

// close closes the kept-alive connections.
func (s *rawSender) close() {
	for {
		select {
		case rc := <-s.idle:
			rc.c.Close()
		default:
			return
		}
	}
}

func (s *rawSender) conn(ctx context.Context) (*rawConn, error) {
	select {
	case rc := <-s.idle:
		return rc, nil
	default:
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return nil, err
	}
	return &rawConn{c: c, br: bufio.NewReaderSize(c, maxEventBytes)}, nil
}

func (s *rawSender) send(ctx context.Context, r request, onTokens func(int)) error {
	body, err := completionJSON(s.model, r)
	if err != nil {
		return err
	}
	rc, err := s.conn(ctx)
	if err != nil {
		return err
	}
	// A cancelled request unblocks its read and closes the connection.
	stop := context.AfterFunc(ctx, func() { rc.c.Close() })
	err = rc.exchange(s.addr, s.path, body, onTokens)
	if !stop() || err != nil {
		rc.c.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	select {
	case s.idle <- rc:
	default:
		rc.c.Close()
	}
	return nil
}

// exchange writes one request and reads its streamed response to the end.
func (rc *rawConn) exchange(host, path string, body []byte, onTokens func(int)) error {
	req := make([]byte, 0, 160+len(body))
	req = fmt.Appendf(req, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: %d\r\n\r\n",
		path, host, len(body))
	if _, err := rc.c.Write(append(req, body...)); err != nil {
		return err
	}
	tp := textproto.NewReader(rc.br)
	status, err := tp.ReadLine()
	if err != nil {
		return fmt.Errorf("response: %w", err)
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return fmt.Errorf("response headers: %w", err)
	}
	code, ok := strings.CutPrefix(status, "HTTP/1.1 ")
	if !ok {
		return fmt.Errorf("response: status line %q", status)
	}
	if h.Get("Transfer-Encoding") != "chunked" {
		return rc.refusal(code, h)
	}
	chunks := httputil.NewChunkedReader(rc.br)
	if !strings.HasPrefix(code, "200") {
		msg, _ := io.ReadAll(io.LimitReader(chunks, 4096))
		return fmt.Errorf("HTTP %s: %s", code, bytes.TrimSpace(msg))
	}
	if err := readSSE(chunks, onTokens); err != nil {
		return err
	}
	// The last chunk and its empty trailer: the connection is then ready
	// for the next request.
	if _, err := io.Copy(io.Discard, io.LimitReader(chunks, maxEventBytes)); err != nil {
		return err
	}
	for {
		line, err := tp.ReadLine()
		if err != nil || line == "" {
			return err
		}
	}
}

// refusal reads a response that is not a stream (an error answer, with a
// Content-Length) and makes it the error.
func (rc *rawConn) refusal(code string, h textproto.MIMEHeader) error {
	n, err := strconv.Atoi(h.Get("Content-Length"))
	if err != nil || n < 0 {
		return fmt.Errorf("HTTP %s: neither chunked nor a Content-Length", code)
	}
	msg := make([]byte, min(n, 4096))
	if _, err := io.ReadFull(rc.br, msg); err != nil {
		return fmt.Errorf("HTTP %s: %w", code, err)
	}
	if strings.HasPrefix(code, "200") {
		return errors.New("HTTP 200 without a stream")
	}
	return fmt.Errorf("HTTP %s: %s", code, bytes.TrimSpace(msg))
}
