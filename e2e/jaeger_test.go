package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/internal/freeport"
	"github.com/tpcoord/tpcoord/internal/poll"
)

// jaegerBin finds the Jaeger all-in-one binary: $TPCOORD_JAEGER, else the
// cache scripts/jaeger.sh builds into (building it there if missing).
func jaegerBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TPCOORD_JAEGER"); p != "" {
		return p
	}
	cache := os.Getenv("TPCOORD_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Skipf("Jaeger: no home directory for the cache: %v", err)
		}
		cache = filepath.Join(home, ".cache", "tpcoord")
	}
	bin := filepath.Join(cache, "jaeger-v1.76.0", "jaeger")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if testing.Short() {
		t.Skipf("Jaeger not built (%s missing) and -short: run scripts/jaeger.sh --build", bin)
	}
	t.Logf("building Jaeger with scripts/jaeger.sh --build (about 7 minutes on 2 cores)")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "../scripts/jaeger.sh", "--build").CombinedOutput()
	if err != nil {
		t.Skipf("Jaeger all-in-one cannot be built, skipping the tracing e2e test: %v\n%s", err, out)
	}
	return bin
}

// freePorts returns n loopback addresses with distinct ports free a
// moment ago, outside the kernel's ephemeral range (see freeport).
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	ports, err := freeport.PickN("127.0.0.1", false, n)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, p := range ports {
		addrs = append(addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	}
	return addrs
}

// startJaeger runs Jaeger v2 (in memory) with its OTLP gRPC and HTTP
// receivers and query API on free ports; it returns their addresses.
func startJaeger(t *testing.T) (otlpGRPC, otlpHTTP, query string) {
	t.Helper()
	bin := jaegerBin(t)
	addrs := freePorts(t, 4)
	otlpGRPC, otlpHTTP, query, queryGRPC := addrs[0], addrs[1], addrs[2], addrs[3]
	config := jaegerConfig(query, queryGRPC, otlpGRPC, otlpHTTP)
	path := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	cmd := exec.Command(bin, "--config", path)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("jaeger output:\n%s", log.String())
		}
	})
	poll.UntilDetail(t, 60*time.Second, "jaeger query API", func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("jaeger exited:\n%s", log.String())
		default:
		}
		resp, err := http.Get("http://" + query + "/api/services")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
	return otlpGRPC, otlpHTTP, query
}

// jaegerConfig is Jaeger v2's configuration: in-memory storage, the query
// API's HTTP and gRPC endpoints, and the OTLP gRPC and HTTP receivers.
func jaegerConfig(query, queryGRPC, otlpGRPC, otlpHTTP string) string {
	return fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: %s
    grpc:
      endpoint: %s
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`, query, queryGRPC, otlpGRPC, otlpHTTP)
}

// Jaeger's query API (api/traces) as far as the test reads it.
type jaegerTraces struct {
	Data []jaegerTrace `json:"data"`
}

type jaegerTrace struct {
	TraceID   string `json:"traceID"`
	Spans     []jaegerSpan
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
		Tags        []jaegerTag
	} `json:"processes"`
}

type jaegerSpan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	ProcessID     string `json:"processID"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []jaegerTag `json:"tags"`
}

type jaegerTag struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

func tag(tags []jaegerTag, key string) string {
	for _, t := range tags {
		if t.Key == key {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

func queryTraces(query, operation string) ([]jaegerTrace, error) {
	q := url.Values{"service": {"tpcoord"}, "operation": {operation}, "limit": {"100"}, "lookback": {"1h"}}
	resp, err := http.Get("http://" + query + "/api/traces?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("api/traces: %s", resp.Status)
	}
	var out jaegerTraces
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// checkStepTrace reports whether tr is one step traced across all world
// ranks: rank 0's step span (children publish, forward, sample) is the
// parent of every follower's step span (children await_step, forward).
func checkStepTrace(tr jaegerTrace, world int) (bool, string) {
	rankOf := func(s jaegerSpan) string { return tag(tr.Processes[s.ProcessID].Tags, "tpc.rank") }
	parent := func(s jaegerSpan) string {
		for _, r := range s.References {
			if r.RefType == "CHILD_OF" {
				return r.SpanID
			}
		}
		return ""
	}
	children := map[string]map[string]bool{}
	steps := map[string]jaegerSpan{}
	for _, s := range tr.Spans {
		if p := parent(s); p != "" {
			if children[p] == nil {
				children[p] = map[string]bool{}
			}
			children[p][s.OperationName] = true
		}
		if s.OperationName == "step" {
			steps[rankOf(s)] = s
		}
	}
	root, ok := steps["0"]
	if !ok {
		return false, fmt.Sprintf("trace %s: no step span from rank 0", tr.TraceID)
	}
	for _, op := range []string{"publish", "forward", "sample"} {
		if !children[root.SpanID][op] {
			return false, fmt.Sprintf("trace %s: rank 0's step has no %s child", tr.TraceID, op)
		}
	}
	for r := 1; r < world; r++ {
		s, ok := steps[fmt.Sprint(r)]
		if !ok {
			return false, fmt.Sprintf("trace %s: no step span from rank %d (have ranks %v)", tr.TraceID, r, keys(steps))
		}
		if p := parent(s); p != root.SpanID {
			return false, fmt.Sprintf("trace %s: rank %d's step span has parent %q, want rank 0's step %s", tr.TraceID, r, p, root.SpanID)
		}
		if pr := tr.Processes[s.ProcessID]; pr.ServiceName != "tpcoord" || tag(pr.Tags, "tpc.job") == "" {
			return false, fmt.Sprintf("trace %s: rank %d's process is %+v", tr.TraceID, r, pr)
		}
		for _, op := range []string{"await_step", "forward"} {
			if !children[s.SpanID][op] {
				return false, fmt.Sprintf("trace %s: rank %d's step has no %s child", tr.TraceID, r, op)
			}
		}
	}
	return true, ""
}

func keys(m map[string]jaegerSpan) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestJaegerTraces: four ranks export their step spans over OTLP gRPC to a
// real Jaeger; its query API shows a step trace joining all four ranks,
// followers' step spans children of rank 0's, and rank 0's request span.
func TestJaegerTraces(t *testing.T) {
	otlp, _, query := startJaeger(t)
	const world = 4
	j := launch(t, "--nproc", fmt.Sprint(world), "--job", "jaeger", "--forward-time", "2ms",
		"--trace-every", "1", "--otlp-endpoint", otlp, "--otlp-insecure")
	ctx, cancel := contextWithTimeout(60 * time.Second)
	defer cancel()
	g, err := j.generate(ctx, "--prompt", "5,6,7", "--max-tokens", "6", "--seed", "1")
	if err != nil {
		t.Fatal(err)
	}
	// A clean stop flushes every rank's spans before it exits.
	if _, err := j.stop(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatalf("launch exited with %v", err)
	}

	poll.UntilDetail(t, 60*time.Second, "a step trace with spans from all ranks", func() (bool, string) {
		traces, err := queryTraces(query, "step")
		if err != nil {
			return false, err.Error()
		}
		last := fmt.Sprintf("%d step traces", len(traces))
		for _, tr := range traces {
			ok, why := checkStepTrace(tr, world)
			if ok {
				return true, ""
			}
			last = why
		}
		return false, last
	})
	poll.UntilDetail(t, 30*time.Second, "rank 0's request span", func() (bool, string) {
		traces, err := queryTraces(query, "text_completion")
		if err != nil {
			return false, err.Error()
		}
		for _, tr := range traces {
			for _, s := range tr.Spans {
				if s.OperationName != "text_completion" {
					continue
				}
				if tag(s.Tags, "gen_ai.response.finish_reasons") == fmt.Sprintf("[%q]", g.FinishReason) && tag(s.Tags, "gen_ai.usage.output_tokens") == fmt.Sprint(len(g.Tokens)) &&
					tag(s.Tags, "gen_ai.usage.input_tokens") == "3" && tag(s.Tags, "gen_ai.request.seed") == "1" &&
					tag(s.Tags, "span.kind") == "server" && tag(tr.Processes[s.ProcessID].Tags, "tpc.rank") == "0" {
					return true, ""
				}
				return false, fmt.Sprintf("request span tags %v", s.Tags)
			}
		}
		return false, fmt.Sprintf("%d request traces", len(traces))
	})
}

// obsStatus is the part of a rank's status the observability test reads.
type obsStatus struct {
	Rank        int     `json:"rank"`
	Phase       string  `json:"phase"`
	PhaseMs     float64 `json:"phase_ms"`
	MetricsAddr string  `json:"metrics_addr"`
	RecentSteps []struct {
		Step      uint64  `json:"step"`
		ForwardMs float64 `json:"forward_ms"`
	} `json:"recent_steps"`
}

// waitObsStatus waits until all world ranks report a phase, recent steps
// and a metrics address in status, and returns their statuses.
func waitObsStatus(t *testing.T, j *job, world int) []obsStatus {
	t.Helper()
	var ranks []obsStatus
	poll.UntilDetail(t, 30*time.Second, "status with phases and recent steps from every rank", func() (bool, string) {
		out, err := exec.Command(tpcoordBin, "status", "--nats", j.info.NATSURL, "--job", j.info.Job, "--json").Output()
		if err != nil {
			return false, err.Error()
		}
		var s struct{ Ranks []obsStatus }
		if err := json.Unmarshal(out, &s); err != nil {
			return false, err.Error()
		}
		ranks = s.Ranks
		if len(ranks) != world {
			return false, string(out)
		}
		for _, r := range ranks {
			if r.Phase == "" || len(r.RecentSteps) == 0 || r.MetricsAddr == "" {
				return false, string(out)
			}
		}
		return true, ""
	})
	return ranks
}

// checkRankEndpoints checks r's /readyz and /metrics: ready, step phase
// and state metrics, and on rank 0 the request counter.
func checkRankEndpoints(t *testing.T, r obsStatus) {
	t.Helper()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + r.MetricsAddr + path)
		if err != nil {
			t.Fatalf("rank %d %s: %v", r.Rank, path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("rank %d /readyz: %d, want 200", r.Rank, code)
	}
	code, body := get("/metrics")
	if code != 200 || !strings.Contains(body, `tpcoord_step_phase_seconds_count{phase="forward"}`) || !strings.Contains(body, `tpcoord_rank_state{state="running"} 1`) {
		t.Errorf("rank %d /metrics: %d\n%s", r.Rank, code, body)
	}
	if r.Rank == 0 && !strings.Contains(body, `tpcoord_requests_total{finish_reason=`) {
		t.Errorf("rank 0 /metrics has no requests_total:\n%s", body)
	}
}

// TestMetricsStatusFlight: without Jaeger, ranks started with metrics on a
// free port and a flight directory serve /metrics and /readyz, report their
// phase, recent steps and metrics address in status, dump the flight
// recorder on SIGUSR1, and rank 0 dumps it when a follower is lost.
func TestMetricsStatusFlight(t *testing.T) {
	dir := t.TempDir()
	j := launch(t, "--nproc", "2", "--job", "obs", "--forward-time", "1ms",
		"--metrics-addr", "127.0.0.1:0", "--flight-dir", dir, "--on-peer-loss", "fail")
	ctx, cancel := contextWithTimeout(60 * time.Second)
	defer cancel()
	if _, err := j.generate(ctx, "--prompt", "5,6,7", "--max-tokens", "4"); err != nil {
		t.Fatal(err)
	}
	for _, r := range waitObsStatus(t, j, 2) {
		checkRankEndpoints(t, r)
	}

	dumps := func(rank int) []string {
		files, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("flight-job-obs-rank-%d-*.txt", rank)))
		return files
	}
	if err := syscall.Kill(j.info.PIDs[1], syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	poll.UntilDetail(t, 30*time.Second, "rank 1's flight dump after SIGUSR1", func() (bool, string) {
		return len(dumps(1)) == 1, fmt.Sprint(dumps(1))
	})
	data, err := os.ReadFile(dumps(1)[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "flight recorder job obs rank 1: phase ") || !strings.Contains(string(data), "forward") {
		t.Errorf("dump:\n%s", data)
	}

	// A lost follower ends rank 0's loop in error: it dumps too.
	if err := syscall.Kill(j.info.PIDs[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	poll.UntilDetail(t, 60*time.Second, "rank 0's flight dump after losing rank 1", func() (bool, string) {
		return len(dumps(0)) == 1, fmt.Sprint(dumps(0))
	})
	_ = j.wait(60 * time.Second)
}

// TestJaegerFromEnvOnly: with only OTEL_EXPORTER_OTLP_ENDPOINT set to the
// collector's OTLP/HTTP URL (the standard 4318 form) and no flags, the
// agents export over http/protobuf, the specification's default protocol,
// and the spans reach Jaeger.
func TestJaegerFromEnvOnly(t *testing.T) {
	_, otlpHTTP, query := startJaeger(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+otlpHTTP)
	t.Setenv("OTEL_SERVICE_NAME", "tpcoord-env")
	j := launch(t, "--nproc", "2", "--job", "jaeger-env", "--forward-time", "2ms", "--trace-every", "1")
	ctx, cancel := contextWithTimeout(60 * time.Second)
	defer cancel()
	if _, err := j.generate(ctx, "--prompt", "5,6,7", "--max-tokens", "4"); err != nil {
		t.Fatal(err)
	}
	if _, err := j.stop(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatalf("launch exited with %v", err)
	}
	if strings.Contains(j.log.String(), "trace export failed") {
		t.Errorf("an export failed:\n%s", tail(j.log.String(), 20))
	}
	poll.UntilDetail(t, 60*time.Second, "step spans of service tpcoord-env", func() (bool, string) {
		resp, err := http.Get("http://" + query + "/api/traces?service=tpcoord-env&operation=step&limit=5")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var body struct {
			Data []json.RawMessage `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return false, err.Error()
		}
		return len(body.Data) > 0, fmt.Sprintf("%d traces", len(body.Data))
	})
}
