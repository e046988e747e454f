package agent

import (
	"fmt"
	"net"
	"strings"

	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/internal/loopback"
)

// Exposure is one way a configuration opens the job to the network
// without protection: the field it is about and what is open.
type Exposure struct {
	Field string
	What  string
}

func (e Exposure) String() string { return e.Field + ": " + e.What }

// natsCredentialFields are the NATSAuth fields that give a connection
// credentials (natsbus.Auth.HasCredentials), for error messages.
var natsCredentialFields = []string{"NATSAuth.User", "NATSAuth.CredsFile", "NATSAuth.NKeySeedFile", "NATSAuth.TLSCert"}

// Exposures lists what the configuration leaves open beyond loopback:
// memberlist bound beyond it without a gossip key (anyone who reaches the
// port could read the membership and join the job), and NATS servers
// beyond it reached without credentials (a server that lets the rank in
// without any lets anyone in, to publish steps and requests). Loopback is
// loopback.Host's rule, judged from the text (no DNS): an IP literal,
// or "localhost" (for NATS URLs; Bind takes IP addresses only); 0.0.0.0,
// :: and every other name reach the network.
// A hosted server (NATSServe) is not listed: natsbus.Serve refuses one
// beyond loopback without credentials whatever Insecure says.
//
// Validate refuses the first unless Insecure is set; Run then logs them.
func (c *Config) Exposures() []Exposure {
	var out []Exposure
	if c.GossipKeyFile == "" && !loopback.HostPort(c.Bind) {
		out = append(out, Exposure{"Bind", fmt.Sprintf(
			"%s is not a loopback address and there is no gossip key: memberlist gossip would be unencrypted and unauthenticated, "+
				"open to anyone who can reach the port", c.Bind)})
	}
	if c.NATSServe {
		return out
	}
	if open := natsbus.Unauthenticated(c.NATS, c.NATSAuth); len(open) > 0 {
		out = append(out, Exposure{"NATS", fmt.Sprintf(
			"%s: not on loopback, and this rank would connect without credentials (none in the URL as user:password@ or token@, "+
				"nor given otherwise): a server that accepts such a connection accepts anyone who can reach it, to publish steps and requests", strings.Join(open, ", "))})
	}
	return out
}

// validateExposure refuses an unparsable Bind and, unless Insecure is
// set, the first exposure, naming what would protect it. Bind's host must
// be an IP address (or empty: every interface): the member's sockets bind
// addresses, not names ("localhost" included), and judging a name's
// exposure would need DNS.
func (c *Config) validateExposure() error {
	host, _, err := net.SplitHostPort(c.Bind)
	if err != nil {
		return fielderr.New("Bind", "%q is not host:port", c.Bind)
	}
	if host != "" && net.ParseIP(host) == nil {
		return fielderr.New("Bind", "%q: memberlist binds an IP address, not a name (%q); give 127.0.0.1 or this host's address", c.Bind, host)
	}
	exp := c.Exposures()
	if c.Insecure || len(exp) == 0 {
		return nil
	}
	fix := []string{"GossipKeyFile"}
	if exp[0].Field == "NATS" {
		fix = natsCredentialFields
	}
	return &fielderr.Error{Field: exp[0].Field, Err: fmt.Errorf("%s", exp[0].What), Fix: fix, Override: "Insecure"}
}
