package main

import (
	"errors"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// fieldFlags maps a configuration field, as *fielderr.Error names it
// ("WorldSize", "NoisePool.Rows"), to the flag that sets it, so a library's
// error about a field reaches the operator naming the flag.
type fieldFlags map[string]string

// name records that flag sets field and returns flag, for use inline in
// a flag definition.
func (f fieldFlags) name(field, flag string) string {
	f[field] = flag
	return flag
}

// flagOf is the flag that sets field (or, with none for it, the field in
// flag style).
func (f fieldFlags) flagOf(field string) string {
	if flag, ok := f[field]; ok {
		return flag
	}
	return strings.ToLower(strings.ReplaceAll(field, ".", "-"))
}

// flagError is a field error as the CLI shows it: naming the flag, and
// the flags that would fix it.
type flagError struct {
	flag   string
	remedy string
	fe     *fielderr.Error
}

func (e *flagError) Error() string { return e.flag + ": " + e.fe.Err.Error() + e.remedy }
func (e *flagError) Unwrap() error { return e.fe }

// configErr turns err into an exit-2 error: a field error names its flag
// (or, with no flag for it, the field in flag style); others stay as they
// are.
func (f fieldFlags) configErr(err error) error {
	var fe *fielderr.Error
	if errors.As(err, &fe) {
		remedy := fe.Remedy(func(field string) string { return "--" + f.flagOf(field) })
		return &exitError{code: exitConfig, err: &flagError{flag: f.flagOf(fe.Field), remedy: remedy, fe: fe}}
	}
	return &exitError{code: exitConfig, err: err}
}

// natsAuthFlags binds the NATS authentication and TLS flags that every
// command that connects shares to a, recording their fields under prefix
// ("NATSAuth" in the agent's configuration).
func natsAuthFlags(fs *pflag.FlagSet, a *natsbus.Auth, f fieldFlags, prefix string) {
	p := func(field string) string {
		if prefix == "" {
			return field
		}
		return prefix + "." + field
	}
	fs.StringVar(&a.CredsFile, f.name(p("CredsFile"), "nats-creds"), "", "NATS credentials file (JWT and nkey seed)")
	fs.StringVar(&a.User, f.name(p("User"), "nats-user"), "", "NATS user name (with --nats-password-file)")
	fs.StringVar(&a.PasswordFile, f.name(p("PasswordFile"), "nats-password-file"), "", "file holding the NATS password")
	fs.StringVar(&a.NKeySeedFile, f.name(p("NKeySeedFile"), "nats-nkey-seed"), "", "NATS nkey seed file")
	fs.StringVar(&a.TLSCA, f.name(p("TLSCA"), "nats-tls-ca"), "", "CA bundle that signed the NATS server's certificate")
	fs.StringVar(&a.TLSCert, f.name(p("TLSCert"), "nats-tls-cert"), "", "client certificate for NATS mutual TLS (with --nats-tls-key)")
	fs.StringVar(&a.TLSKey, f.name(p("TLSKey"), "nats-tls-key"), "", "client key for NATS mutual TLS")
}
