// Package telemetry is what an agent tells the outside about itself: trace
// spans exported over OTLP (configured by Config and the standard OTEL_*
// variables), the Prometheus metrics server (/metrics, /healthz, /readyz,
// and the gateway's spellings /health, /ready as aliases), and the flight
// recorder's dumps (to the log and optionally to files).
//
// It owns the exporter, the HTTP server and their goroutines; Close stops
// them. It installs nothing globally: the caller takes Tracer() and, if it
// wants OpenTelemetry's own errors logged, ErrorHandler.
package telemetry
