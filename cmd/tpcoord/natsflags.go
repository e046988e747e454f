package main

import (
	"github.com/spf13/pflag"

	"github.com/tpcoord/tpcoord/broadcast/natsbus"
)

// natsAuth holds the NATS authentication and TLS flags shared by every
// command that connects.
type natsAuth struct {
	Creds, User, PasswordFile, NKeySeed string
	TLSCA, TLSCert, TLSKey              string
}

func (a *natsAuth) flags(fs *pflag.FlagSet) {
	fs.StringVar(&a.Creds, "nats-creds", "", "NATS credentials file (JWT and nkey seed)")
	fs.StringVar(&a.User, "nats-user", "", "NATS user name (with --nats-password-file)")
	fs.StringVar(&a.PasswordFile, "nats-password-file", "", "file holding the NATS password")
	fs.StringVar(&a.NKeySeed, "nats-nkey-seed", "", "NATS nkey seed file")
	fs.StringVar(&a.TLSCA, "nats-tls-ca", "", "CA bundle that signed the NATS server's certificate")
	fs.StringVar(&a.TLSCert, "nats-tls-cert", "", "client certificate for NATS mutual TLS (with --nats-tls-key)")
	fs.StringVar(&a.TLSKey, "nats-tls-key", "", "client key for NATS mutual TLS")
}

func (a *natsAuth) apply(c *natsbus.Config) {
	c.CredsFile, c.User, c.PasswordFile, c.NKeySeedFile = a.Creds, a.User, a.PasswordFile, a.NKeySeed
	c.TLSCA, c.TLSCert, c.TLSKey = a.TLSCA, a.TLSCert, a.TLSKey
}
