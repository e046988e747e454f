package k8stest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBaseRunsLocally renders the base and runs its pods as local
// processes (doc.go lists the substitutions): the NATS server, the ranks
// for ordinals 0..N-1 with their init containers, and the gateway. Every
// container must pass its own readiness probe, the ranks must answer
// status as one job, and the gateway must serve /v1/models and a
// completion over TLS with an API key.
func TestBaseRunsLocally(t *testing.T) {
	r, err := render(baseDir)
	if err != nil {
		t.Fatal(err)
	}
	n, err := newNetwork(r)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := buildTpcoord(t, dir)
	natsBin, err := exec.LookPath("nats-server")
	if err != nil {
		if natsBin, err = exec.LookPath("/usr/sbin/nats-server"); err != nil {
			t.Fatalf("nats-server is not installed (scripts/deps.sh installs Debian's): %v", err)
		}
	}
	secrets, u := userSecrets(t, n)
	run := &runner{t: t, dir: dir, net: n, secrets: secrets,
		programs: map[string]string{"/usr/bin/tpcoord": bin, "/nats-server": natsBin, "sh": "/bin/sh"}}
	t.Cleanup(run.stopAll)
	pods := r.pods()
	for _, owner := range []string{"tpcoord-nats", "tpcoord-agent", "tpcoord-gateway"} {
		for _, p := range pods {
			if p.owner == owner {
				if err := run.startPod(p); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	waitReady(t, run, pods)
	checkOneJob(t, bin, dir, n, u, r.statefulSets["tpcoord-agent"].Spec.Replicas)
	checkGateway(t, n, u)
}

// buildTpcoord builds the image's binary (scripts/package.sh --binary: the
// same flags, so the same build cache as deps.sh prepared).
func buildTpcoord(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "tpcoord")
	if out, err := exec.Command("../package.sh", "--binary", bin).CombinedOutput(); err != nil {
		t.Fatalf("scripts/package.sh --binary: %v\n%s", err, out)
	}
	return bin
}

// user is what the Secrets' maker keeps for the clients.
type user struct {
	clientPassword string
	apiKey         string
	ca             *x509.CertPool
}

// userSecrets makes the Secrets the base mounts, as docs/operations.md
// tells its reader to: random keys and passwords, the NATS configuration
// of configs/nats with its passwords replaced (and, the one substitution
// in a Secret, its listen address the NATS pod's local one), API keys
// and a TLS certificate for the gateway.
func userSecrets(t *testing.T, n *network) (map[string]map[string][]byte, user) {
	t.Helper()
	random := func() string {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		return base64.StdEncoding.EncodeToString(b)
	}
	conf, err := os.ReadFile("../../configs/nats/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	pw := map[string]string{"rank0": random(), "rank": random(), "client": random()}
	text := string(conf)
	for name, p := range pw {
		text = strings.ReplaceAll(text, `"CHANGE-ME-`+name+`"`, `"`+p+`"`)
	}
	if strings.Contains(text, "CHANGE-ME") {
		t.Fatal("configs/nats/nats-server.conf has a password this test does not replace")
	}
	if text, err = n.rewrite("tpcoord-nats-0", text); err != nil {
		t.Fatal(err)
	}
	u := user{clientPassword: pw["client"], apiKey: "sk-" + random()}
	cert, key, ca := selfSigned(t)
	u.ca = ca
	return map[string]map[string][]byte{
		"tpcoord-keys": {"job.key": []byte(random() + "\n"), "gossip.key": []byte(random() + "\n")},
		"tpcoord-nats": {"nats-server.conf": []byte(text), "rank0.pw": []byte(pw["rank0"]),
			"rank.pw": []byte(pw["rank"]), "client.pw": []byte(pw["client"])},
		"tpcoord-gateway": {"api-keys": []byte(u.apiKey + "\n"), "tls.crt": cert, "tls.key": key},
	}, u
}

// selfSigned returns a certificate for the gateway's Service name and
// 127.0.0.1, its key, and a pool that trusts it.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tpcoord"},
		DNSNames: []string{"tpcoord"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), pool
}

// waitReady polls every container's readiness probe, failing the test if
// a container exits or a probe has not passed within 2 minutes.
func waitReady(t *testing.T, run *runner, pods []pod) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for _, p := range pods {
		for _, c := range p.spec.Containers {
			until(t, deadline, p.name+"/"+c.Name+" ready", func() (bool, string) {
				for _, pr := range run.procs {
					select {
					case <-pr.done:
						t.Fatalf("%s exited: %v", pr.name, pr.err)
					default:
					}
				}
				return run.ready(p, c)
			})
		}
	}
}

// until calls cond, at growing intervals (1 ms to 50 ms, as
// internal/poll), until it returns true; past the deadline it fails t
// with what was awaited and cond's last detail.
func until(t *testing.T, deadline time.Time, what string, cond func() (bool, string)) {
	t.Helper()
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within the deadline: %s", what, detail)
		}
		time.Sleep(wait)
	}
}

// checkOneJob asks the job's status through NATS, as a client: every
// rank 0..replicas-1 answers, in one epoch.
func checkOneJob(t *testing.T, bin, dir string, n *network, u user, replicas *int32) {
	t.Helper()
	port, err := n.local("tpcoord-nats-0", 4222)
	if err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(dir, "client.pw")
	if err := os.WriteFile(pwFile, []byte(u.clientPassword), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "status", "--job", "llm-granite", "--nats", fmt.Sprintf("nats://127.0.0.1:%d", port),
		"--nats-user", "client", "--nats-password-file", pwFile, "--json", "--wait", "5s").Output()
	if err != nil {
		t.Fatalf("tpcoord status: %v", err)
	}
	var st struct {
		Ranks []struct {
			Rank  int    `json:"rank"`
			Epoch uint32 `json:"epoch"`
		} `json:"ranks"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status %s: %v", out, err)
	}
	var ranks []int
	epochs := map[uint32]bool{}
	for _, r := range st.Ranks {
		ranks = append(ranks, r.Rank)
		epochs[r.Epoch] = true
	}
	slices.Sort(ranks)
	if len(ranks) != int(*replicas) || ranks[0] != 0 || ranks[len(ranks)-1] != int(*replicas)-1 || len(epochs) != 1 {
		t.Errorf("status: ranks %v in epochs %v; want 0..%d in one epoch", ranks, epochs, *replicas-1)
	}
}

// checkGateway calls the gateway's Service as a client in the cluster
// would, over TLS (checking the certificate) with an API key.
func checkGateway(t *testing.T, n *network, u user) {
	t.Helper()
	addr, err := n.rewrite("", "tpcoord:8000")
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: u.ca}}}
	call := func(method, path, body string, v any) {
		t.Helper()
		req, _ := http.NewRequest(method, "https://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+u.apiKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %s, %v", method, path, resp.Status, err)
		}
	}
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	call("GET", "/v1/models", "", &models)
	if len(models.Data) == 0 {
		t.Fatalf("/v1/models lists no model")
	}
	var c struct {
		Choices []struct{} `json:"choices"`
		Usage   struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	call("POST", "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":[1,2,3],"max_tokens":4,"seed":1}`, models.Data[0].ID), &c)
	if len(c.Choices) != 1 || c.Usage.CompletionTokens < 1 {
		t.Errorf("/v1/completions: %+v; want one choice with tokens", c)
	}
}
