package natsbus

import (
	"net/url"
	"strings"

	"github.com/tpcoord/tpcoord/internal/loopback"
)

// HasCredentials reports whether a gives a connection an identity of its
// own: a credentials file, a user (with its password file), an nkey seed
// or a TLS client certificate. A CA alone only checks the server.
func (a Auth) HasCredentials() bool {
	return a.CredsFile != "" || a.User != "" || a.NKeySeedFile != "" || a.TLSCert != ""
}

// Unauthenticated returns the servers of rawURLs (comma-separated, as
// Connect takes them) that are beyond loopback and that a connection with
// a would reach without credentials: none in the URL (user:password@ or
// token@) and none in a. Loopback is loopback.Host's rule: an IP literal
// or "localhost", never a DNS lookup; a URL that does not parse counts as
// beyond loopback. The servers are redacted, ready for a message.
func Unauthenticated(rawURLs string, a Auth) []string {
	if a.HasCredentials() {
		return nil
	}
	var out []string
	for _, raw := range strings.Split(rawURLs, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw // as nats.go reads a URL without a scheme
		}
		u, err := url.Parse(raw)
		if err == nil && (loopback.Host(u.Hostname()) || urlHasCredentials(u)) {
			continue
		}
		out = append(out, Redact(raw))
	}
	return out
}

// urlHasCredentials reports whether u carries a token or a user and
// password, as nats.go presents them to the server.
func urlHasCredentials(u *url.URL) bool {
	if u.User == nil {
		return false
	}
	pw, ok := u.User.Password()
	return u.User.Username() != "" || (ok && pw != "")
}
