package broadcast

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// ErrClosed is returned by a Transport that has been closed.
var ErrClosed = errors.New("transport closed")

// ErrNotSent is returned by Publish when the message could not be written
// because the connection is failing (a reset socket, a full reconnect
// buffer) but the transport is not closed: it reconnects on its own, and
// the message may or may not have reached anyone.
var ErrNotSent = errors.New("message not sent while the connection recovers")

// TooLargeError is Publish's error for a message larger than the server
// accepts (NATS's max_payload: 1 MiB on a server of default settings, 8 MiB
// on tpcoord's embedded one). Sending it again can never succeed.
type TooLargeError struct {
	Size int   // the message's payload, in bytes
	Max  int   // the server's max payload, in bytes
	Err  error // the transport's own error, if any
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("message of %d bytes is larger than the server's max payload of %d bytes", e.Size, e.Max)
}

func (e *TooLargeError) Unwrap() error { return e.Err }

// Msg is one message as a Transport delivers it. Data is owned by the
// handler only for the duration of the call; copy it to keep it.
type Msg struct {
	Subject string
	Reply   string
	Header  map[string]string
	Data    []byte
}

// ErrNoResponders is what a request gets when nobody subscribes to its
// subject (for example rank 0 is not running, or not yet subscribed).
var ErrNoResponders = errors.New("no responders")

// IsNoResponders reports whether m is the server's "no responders" status
// message rather than a reply.
func IsNoResponders(m *Msg) bool { return len(m.Data) == 0 && m.Header["Status"] == "503" }

// ErrRefused is what a publish gets when the server refused it after the
// fact: this connection's user may not publish to the subject (NATS
// permissions). Sending it again can never succeed.
var ErrRefused = errors.New("refused by the server")

// RefusalWatcher is implemented by a Transport whose server may refuse a
// publish after Publish has returned (NATS sends a permissions violation
// asynchronously). WatchRefusals returns a channel that receives an error
// wrapping ErrRefused, once, when a later publish to subject is refused,
// and a function that stops the watch.
type RefusalWatcher interface {
	WatchRefusals(subject string) (refused <-chan error, stop func())
}

// Transport is the narrow view of the message bus the decode loop needs:
// fire-and-forget publish, subscriptions with a non-blocking handler, and
// private inboxes for streamed replies. natsbus implements it over NATS;
// Hub implements it in memory for tests.
type Transport interface {
	Publish(m *Msg) error
	// Subscribe calls fn for every message on subject (NATS wildcards
	// allowed). fn runs on the transport's delivery goroutine and must not
	// block. The returned function unsubscribes.
	Subscribe(subject string, fn func(*Msg)) (unsubscribe func() error, err error)
	NewInbox() string
	// Flush waits until everything published so far reached the server.
	Flush(ctx context.Context) error
	Close()
}

// Subjects names the job's subjects (docs/protocol.md).
type Subjects struct {
	Prefix string
	Job    string
}

func (s Subjects) base() string { return s.Prefix + "." + s.Job }

// Step carries rank 0's binary Step messages to every rank.
func (s Subjects) Step() string { return s.base() + ".step" }

// Replay is where a follower that missed steps asks rank 0 for them again.
func (s Subjects) Replay() string { return s.base() + ".replay" }

// Heartbeat is the subject rank publishes its heartbeats on.
func (s Subjects) Heartbeat(rank int) string { return fmt.Sprintf("%s.hb.%d", s.base(), rank) }

// Heartbeats matches every rank's heartbeat subject, for rank 0 and
// launch, which watch them all.
func (s Subjects) Heartbeats() string { return s.base() + ".hb.*" }

// Generate takes clients' generation requests to rank 0; the replies
// stream to the request's reply subject.
func (s Subjects) Generate() string { return s.base() + ".generate" }

// Status is asked by anyone; every rank answers with its RankStatus.
func (s Subjects) Status() string { return s.base() + ".status" }

// Control carries aborts and peer-loss notices from rank 0 or launch to
// every rank.
func (s Subjects) Control() string { return s.base() + ".control" }

// Client takes a client's cancel and keepalive messages about a request
// in flight to rank 0.
func (s Subjects) Client() string { return s.base() + ".client" }

// ValidateToken checks that v can be one token of a NATS subject: the
// prefix and the job ID end up in subjects, so dots, wildcards and spaces
// are refused rather than silently changing what a subscription matches.
func ValidateToken(field, v string) error {
	if v == "" {
		return fielderr.New(field, "must not be empty")
	}
	if i := strings.IndexAny(v, ".*> \t\r\n"); i >= 0 {
		return fielderr.New(field, "%q contains %q, which is not allowed in a NATS subject token", v, v[i])
	}
	return nil
}
