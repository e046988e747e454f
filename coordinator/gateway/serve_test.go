package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned writes a certificate for 127.0.0.1 and its key; it returns
// their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gateway"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// Serve answers over TLS with the configured certificate, refuses plain
// HTTP, and returns once its context ends.
func TestServeTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	g, _ := newTestGateway(t, "ab", func(c *Config) { c.Listen, c.TLSCert, c.TLSKey = "127.0.0.1:0", certFile, keyFile })
	ln, err := Listen(g.cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := URL(g.cfg, ln)
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("URL %s", url)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, ln) }()
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := c.Post(url+"/completions", "application/json", strings.NewReader(`{"prompt":[1],"max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	plain := "http://" + strings.TrimPrefix(url, "https://")
	if resp, err := http.Get(plain + "/models"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP answered 200 on the TLS listener")
		}
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(ShutdownGrace + 5*time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		mod   func(*Config)
		field string
	}{
		{func(c *Config) { c.Listen = "" }, "Listen"},
		{func(c *Config) { c.Model = "" }, "Model"},
		{func(c *Config) { c.TLSCert = "x" }, "TLSCert"},
		{func(c *Config) { c.MaxBodyBytes = 10 }, "MaxBodyBytes"},
		{func(c *Config) { c.RequestTimeout = 0 }, "RequestTimeout"},
		{func(c *Config) { c.APIKeys = []string{""} }, "APIKeys"},
	} {
		cfg := DefaultConfig()
		cfg.Model = "m"
		c.mod(&cfg)
		if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), c.field+":") {
			t.Errorf("%s: %v", c.field, err)
		}
	}
}

// ServeWhile answers while use runs, stops serving when it returns, and
// returns its error.
func TestServeWhile(t *testing.T) {
	g, _ := newTestGateway(t, "ab", func(c *Config) { c.Listen = "127.0.0.1:0" })
	ln, err := Listen(g.cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := URL(g.cfg, ln)
	errUse := errors.New("use ended")
	err = g.ServeWhile(context.Background(), ln, func(context.Context) error {
		resp, err := http.Get(url + "/models")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return errUse
	})
	if !errors.Is(err, errUse) || err.Error() != errUse.Error() {
		t.Fatalf("ServeWhile: %v, want only use's error", err)
	}
	if resp, err := http.Get(url + "/models"); err == nil {
		resp.Body.Close()
		t.Fatal("still serving after use returned")
	}
}

func TestListenAddr(t *testing.T) {
	for in, want := range map[string]string{
		"8000": "127.0.0.1:8000", ":8000": "127.0.0.1:8000", "0.0.0.0:8000": "0.0.0.0:8000",
		"[::1]:8000": "[::1]:8000", "10.0.0.1:80": "10.0.0.1:80",
	} {
		if got := ListenAddr(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestReadAPIKeys(t *testing.T) {
	p := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(p, []byte("# rotated monthly\nnew-key\n\n  old-key  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := ReadAPIKeys(p)
	if err != nil || strings.Join(keys, ",") != "new-key,old-key" {
		t.Fatalf("keys %q, %v", keys, err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("# none\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAPIKeys(empty); err == nil || !strings.Contains(err.Error(), "holds no key") {
		t.Fatalf("empty file: %v", err)
	}
}

// Validate refuses an API beyond loopback without API keys and TLS unless
// Insecure, and a host name there.
func TestConfigExposure(t *testing.T) {
	for _, c := range []struct {
		mod  func(*Config)
		want string // "" valid
	}{
		{func(c *Config) { c.Listen = "127.0.0.1:8000" }, ""},
		{func(c *Config) { c.Listen = "10.1.2.3:8000" }, "Listen: 10.1.2.3:8000 is reachable beyond this host: requests need API keys and TLS (give APIKeys; or Insecure to accept the risk)"},
		{func(c *Config) { c.Listen, c.Insecure = "10.1.2.3:8000", true }, ""},
		{func(c *Config) { c.Listen, c.APIKeys = "10.1.2.3:8000", []string{"k"} }, "Listen: 10.1.2.3:8000 is reachable"},
		{func(c *Config) {
			c.Listen, c.APIKeys, c.TLSCert, c.TLSKey = "10.1.2.3:8000", []string{"k"}, "c.pem", "k.pem"
		}, ""},
		{func(c *Config) { c.Listen = "example.com:8000" }, `Listen: "example.com": give an IP address`},
		{func(c *Config) { c.Listen = "10.1.2.3" }, `Listen: "10.1.2.3" is not host:port`},
	} {
		cfg := DefaultConfig()
		cfg.Model = "m"
		c.mod(&cfg)
		err := cfg.Validate()
		if (c.want == "") != (err == nil) || err != nil && !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", cfg.Listen, err, c.want)
		}
	}
}
