// Package lifecycle is the single owner of a component's goroutines and
// cleanup. A Group starts goroutines only while it is running (Go refuses
// once shutdown has begun), keeps the component's closers in the order they
// were registered, and Shutdown (safe to call any number of times, from any
// goroutine) signals Stopping, runs the closers newest first, and waits for
// every goroutine. It replaces a chain of defers whose order matters with
// one list that says it.
package lifecycle

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// ErrStopped is returned by Go and AddCloser once Shutdown has begun.
var ErrStopped = errors.New("shutting down")

// Group owns goroutines and closers. The zero value is not usable; call New.
type Group struct {
	log      *slog.Logger
	stopping chan struct{}
	done     chan struct{}
	wg       sync.WaitGroup

	mu      sync.Mutex
	stopped bool
	closers []closer
	err     error
}

type closer struct {
	name string
	fn   func() error
}

// New returns a running group; log (may be nil) receives closer errors at
// debug level, as Shutdown returns them too.
func New(log *slog.Logger) *Group {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Group{log: log, stopping: make(chan struct{}), done: make(chan struct{})}
}

// Go runs fn on a goroutine that Shutdown waits for. fn must return soon
// after Stopping is closed (or after a closer has closed what it waits on).
// Once Shutdown has begun, Go starts nothing and returns ErrStopped.
func (g *Group) Go(name string, fn func()) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return fmt.Errorf("start %s: %w", name, ErrStopped)
	}
	g.wg.Go(fn)
	return nil
}

// AddCloser registers fn to run at Shutdown, after the closers registered
// later and before those registered earlier: register a resource's closer
// right after creating it, and things close in the reverse order of their
// making. After Shutdown has begun, fn runs at once and AddCloser returns
// ErrStopped, so nothing is left open.
func (g *Group) AddCloser(name string, fn func() error) error {
	g.mu.Lock()
	if !g.stopped {
		g.closers = append(g.closers, closer{name, fn})
		g.mu.Unlock()
		return nil
	}
	g.mu.Unlock()
	if err := fn(); err != nil {
		g.log.Debug("close", "what", name, "err", err)
	}
	return fmt.Errorf("register %s: %w", name, ErrStopped)
}

// Stopping is closed when Shutdown begins.
func (g *Group) Stopping() <-chan struct{} { return g.stopping }

// Shutdown closes Stopping, runs the closers newest first, and waits for
// every goroutine started with Go. It returns the closers' errors joined.
// Later and concurrent calls wait for the first to finish and return the
// same error.
func (g *Group) Shutdown() error {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		<-g.done
		return g.err
	}
	g.stopped = true
	closers := g.closers
	g.closers = nil
	g.mu.Unlock()

	close(g.stopping)
	var errs []error
	for i := len(closers) - 1; i >= 0; i-- {
		c := closers[i]
		if err := c.fn(); err != nil {
			g.log.Debug("close", "what", c.name, "err", err)
			errs = append(errs, fmt.Errorf("close %s: %w", c.name, err))
		}
	}
	g.wg.Wait()
	g.err = errors.Join(errs...)
	close(g.done)
	return g.err
}
