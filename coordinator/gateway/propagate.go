package gateway

import (
	"context"

	"go.opentelemetry.io/otel/propagation"

	"github.com/tpcoord/tpcoord/rank/client"
)

// withTraceHeader returns ctx set up so that client.Generate sends the W3C
// trace context of ctx's span (traceparent, and tracestate if any) with
// the request, and rank 0's request span joins the caller's trace. Package
// client cannot do it itself: it does not depend on OpenTelemetry. ctx
// without a valid span is returned as it is.
func withTraceHeader(ctx context.Context) context.Context {
	h := map[string]string{}
	propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(h))
	return client.WithHeader(ctx, h)
}
