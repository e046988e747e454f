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
