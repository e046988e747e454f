package telemetry

import (
	"net"
	"strings"

	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// Config selects what an agent exports.
type Config struct {
	// OTLPEndpoint is a collector's host:port or URL; empty: the
	// OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT variable if set, else no export.
	OTLPEndpoint string
	// OTLPProtocol is grpc or http (http/protobuf); empty: the
	// OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL variable, else grpc for a bare
	// host:port endpoint and http/protobuf (the specification's default)
	// otherwise.
	OTLPProtocol string
	// OTLPInsecure exports without TLS (an http:// URL implies it).
	OTLPInsecure bool
	// MetricsAddr serves /metrics, /healthz and /readyz (empty: off; port
	// 0 picks a free one).
	MetricsAddr string
	// FlightDir, if set, receives a file per flight recorder dump.
	FlightDir string
	// FlightSteps is how many steps a rank's flight recorder keeps; the
	// agent's default is rank.DefaultFlightSteps. A gateway keeps none.
	FlightSteps int
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch strings.ToLower(c.OTLPProtocol) {
	case "", "grpc", "http", "http/protobuf":
	default:
		return fielderr.New("OTLPProtocol", "%q is not one of grpc, http", c.OTLPProtocol)
	}
	if c.FlightSteps < 1 || c.FlightSteps > 1<<20 {
		return fielderr.New("FlightSteps", "must be in [1, %d], got %d", 1<<20, c.FlightSteps)
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return fielderr.New("MetricsAddr", "%w", err)
		}
	}
	if c.OTLPEndpoint != "" {
		if _, _, _, err := splitEndpoint(c.OTLPEndpoint); err != nil {
			return err
		}
	}
	return nil
}
