package client

import (
	"context"
	"maps"
	"time"
)

// DefaultCancelGrace is how long a request whose context ended waits for
// rank 0's cancelled reply (and the tokens it carries), unless
// WithCancelGrace says otherwise.
const DefaultCancelGrace = 3 * time.Second

type graceKey struct{}

// WithCancelGrace returns a copy of ctx under which a request that ctx
// ends waits up to d for rank 0's cancelled reply, instead of
// DefaultCancelGrace. A caller bound by a deadline of its own ends ctx d
// before it.
func WithCancelGrace(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, graceKey{}, d)
}

// cancelGrace is ctx's WithCancelGrace, else DefaultCancelGrace.
func cancelGrace(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(graceKey{}).(time.Duration); ok {
		return d
	}
	return DefaultCancelGrace
}

type headerKey struct{}

// WithHeader returns a copy of ctx under which Generate sends h as the
// headers of the generate request's message. A caller that traces puts its
// span's W3C trace context there (traceparent, tracestate), so rank 0's
// request span joins the caller's trace; this package cannot read the span
// itself without importing OpenTelemetry (see the package doc). h is
// copied; an empty h leaves ctx's headers as they are.
func WithHeader(ctx context.Context, h map[string]string) context.Context {
	if len(h) == 0 {
		return ctx
	}
	merged := maps.Clone(headerFrom(ctx))
	if merged == nil {
		merged = make(map[string]string, len(h))
	}
	maps.Copy(merged, h)
	return context.WithValue(ctx, headerKey{}, merged)
}

// headerFrom returns the headers WithHeader put in ctx (nil: none). The
// map is shared: callers must not change it.
func headerFrom(ctx context.Context) map[string]string {
	h, _ := ctx.Value(headerKey{}).(map[string]string)
	return h
}
