package natsbus

import (
	"slices"
	"strings"
	"testing"
)

// TestUnauthenticated: every server beyond loopback must be covered by
// credentials, in its URL or in Auth; loopback needs none; hostnames other
// than localhost count as beyond loopback; passwords never show.
func TestUnauthenticated(t *testing.T) {
	for _, tc := range []struct {
		name string
		urls string
		auth Auth
		want []string
	}{
		{"loopback v4", "nats://127.0.0.1:4222", Auth{}, nil},
		{"loopback v6", "nats://[::1]:4222", Auth{}, nil},
		{"localhost", "nats://localhost:4222", Auth{}, nil},
		{"no scheme, loopback", "127.0.0.1:4222", Auth{}, nil},
		{"remote, no credentials", "nats://10.0.0.1:4222", Auth{}, []string{"nats://10.0.0.1:4222"}},
		{"no scheme, remote", "10.0.0.1:4222", Auth{}, []string{"nats://10.0.0.1:4222"}},
		{"all interfaces", "nats://0.0.0.0:4222", Auth{}, []string{"nats://0.0.0.0:4222"}},
		{"hostname", "tls://nats.example.com:4222", Auth{}, []string{"tls://nats.example.com:4222"}},
		{"remote, user and password", "nats://u:secret@10.0.0.1:4222", Auth{}, nil},
		{"remote, token", "nats://s3cr3t@10.0.0.1:4222", Auth{}, nil},
		{"remote, empty user info", "nats://@10.0.0.1:4222", Auth{}, []string{"nats://REDACTED@10.0.0.1:4222"}},
		{"remote, user and password file", "nats://10.0.0.1:4222", Auth{User: "rank", PasswordFile: "/pw"}, nil},
		{"remote, creds file", "nats://10.0.0.1:4222", Auth{CredsFile: "/c"}, nil},
		{"remote, nkey", "nats://10.0.0.1:4222", Auth{NKeySeedFile: "/s"}, nil},
		{"remote, client certificate", "tls://10.0.0.1:4222", Auth{TLSCert: "/c", TLSKey: "/k"}, nil},
		{"remote, CA only", "tls://10.0.0.1:4222", Auth{TLSCA: "/ca"}, []string{"tls://10.0.0.1:4222"}},
		{"several, each covered", "nats://127.0.0.1:4222, nats://t@10.0.0.1:4222,nats://u:p@10.0.0.2:4222", Auth{}, nil},
		{"several, one uncovered", "nats://u:secret@10.0.0.1:4222,nats://10.0.0.2:4222,nats://localhost:4222", Auth{},
			[]string{"nats://10.0.0.2:4222"}},
		{"several, all uncovered", "nats://10.0.0.1:4222,nats://10.0.0.2:4222", Auth{}, []string{"nats://10.0.0.1:4222", "nats://10.0.0.2:4222"}},
		{"unparsable", "nats://u:se%zzcret@10.0.0.1:4222", Auth{}, []string{"nats://REDACTED@10.0.0.1:4222"}},
		{"empty entries", " , nats://127.0.0.1:4222,", Auth{}, nil},
	} {
		got := Unauthenticated(tc.urls, tc.auth)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: Unauthenticated(%q) = %q, want %q", tc.name, tc.urls, got, tc.want)
		}
		if strings.Contains(strings.Join(got, ","), "secret") {
			t.Errorf("%s: a password shows in %q", tc.name, got)
		}
	}
}
