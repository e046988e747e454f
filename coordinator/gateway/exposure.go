package gateway

import (
	"fmt"
	"net"
	"strings"

	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/internal/loopback"
	"github.com/tpcoord/tpcoord/internal/secretfile"
)

// ListenAddr is addr as the gateway binds it: a bare port (":8000" or
// "8000") on loopback, not on every interface as Go would.
func ListenAddr(addr string) string {
	if !strings.Contains(addr, ":") {
		return "127.0.0.1:" + addr
	}
	if strings.HasPrefix(addr, ":") {
		return "127.0.0.1" + addr
	}
	return addr
}

// exposure refuses an API reachable beyond loopback without keys and TLS,
// unless Insecure accepts the risk.
func (c *Config) exposure() error {
	if loopback.HostPort(c.Listen) || c.Insecure {
		return nil
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fielderr.New("Listen", "%q is not host:port", c.Listen)
	}
	if net.ParseIP(host) == nil {
		return fielderr.New("Listen", "%q: give an IP address (a name may resolve to every interface)", host)
	}
	if len(c.APIKeys) == 0 || c.TLSCert == "" {
		return &fielderr.Error{Field: "Listen", Err: fmt.Errorf("%s is reachable beyond this host: requests need API keys and TLS", c.Listen),
			Fix: []string{"APIKeys"}, Override: "Insecure"}
	}
	return nil
}

// ReadAPIKeys reads a file of API keys (Config.APIKeys), one a line,
// readable by its owner only; blank lines and # comments are skipped.
func ReadAPIKeys(path string) ([]string, error) {
	b, err := secretfile.Read(path, 1<<16)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			keys = append(keys, l)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s holds no key", path)
	}
	return keys, nil
}
