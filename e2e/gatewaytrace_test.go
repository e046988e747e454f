package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/internal/poll"
)

// TestJaegerHTTPTraceReachesRank0: an HTTP request with a W3C traceparent
// to launch --http makes one trace in a real Jaeger: the gateway's server
// span is the caller's child, and rank 0's request span is the gateway
// span's child, across the NATS hop.
func TestJaegerHTTPTraceReachesRank0(t *testing.T) {
	otlp, _, query := startJaeger(t)
	j := launch(t, "--nproc", "2", "--job", "jaeger-http", "--forward-time", "2ms", "--http", "127.0.0.1:0",
		"--trace-every", "1", "--otlp-endpoint", otlp, "--otlp-insecure")
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, err := http.NewRequest(http.MethodPost, j.info.HTTPURL+"/completions",
		strings.NewReader(`{"prompt":[5,6,7],"max_tokens":4,"seed":3,"temperature":0.5}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// A clean stop flushes the gateway's and every rank's spans.
	if _, err := j.stop(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatalf("launch exited with %v", err)
	}
	poll.UntilDetail(t, 60*time.Second, "one trace from the HTTP call to rank 0", func() (bool, string) {
		tr, err := getTrace(query, traceID)
		if err != nil {
			return false, err.Error()
		}
		return checkHTTPTrace(tr, parentID)
	})
}

func getTrace(query, id string) (jaegerTrace, error) {
	resp, err := http.Get("http://" + query + "/api/traces/" + id)
	if err != nil {
		return jaegerTrace{}, err
	}
	defer resp.Body.Close()
	var out jaegerTraces
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return jaegerTrace{}, err
	}
	if resp.StatusCode != 200 || len(out.Data) == 0 {
		return jaegerTrace{}, fmt.Errorf("api/traces/%s: %s, %d traces", id, resp.Status, len(out.Data))
	}
	return out.Data[0], nil
}

// checkHTTPTrace: the gateway's span (GenAI name and attributes) is the
// child of the caller's span parentID, and rank 0's request span is the
// gateway span's child.
func checkHTTPTrace(tr jaegerTrace, parentID string) (bool, string) {
	parentOf := func(s jaegerSpan) string {
		for _, r := range s.References {
			if r.RefType == "CHILD_OF" {
				return r.SpanID
			}
		}
		return ""
	}
	var gw, r0 *jaegerSpan
	for i, s := range tr.Spans {
		proc := tr.Processes[s.ProcessID].Tags
		switch {
		case s.OperationName == "text_completion jaeger-http" && tag(proc, "tpc.role") == "gateway":
			gw = &tr.Spans[i]
		case s.OperationName == "text_completion" && tag(proc, "tpc.rank") == "0":
			r0 = &tr.Spans[i]
		}
	}
	switch {
	case gw == nil || r0 == nil:
		names := []string{}
		for _, s := range tr.Spans {
			names = append(names, s.OperationName)
		}
		return false, fmt.Sprintf("spans %v: gateway's found %v, rank 0's %v", names, gw != nil, r0 != nil)
	case parentOf(*gw) != parentID:
		return false, fmt.Sprintf("the gateway span's parent is %q, want the caller's %s", parentOf(*gw), parentID)
	case parentOf(*r0) != gw.SpanID:
		return false, fmt.Sprintf("rank 0's request span's parent is %q, want the gateway span %s", parentOf(*r0), gw.SpanID)
	}
	for _, want := range [][2]string{
		{"span.kind", "server"}, {"gen_ai.operation.name", "text_completion"}, {"gen_ai.request.model", "jaeger-http"},
		{"gen_ai.request.max_tokens", "4"}, {"gen_ai.request.temperature", "0.5"}, {"gen_ai.usage.input_tokens", "3"},
		{"gen_ai.usage.output_tokens", "4"}, {"gen_ai.response.finish_reasons", `["length"]`}, {"http.response.status_code", "200"},
	} {
		if got := tag(gw.Tags, want[0]); got != want[1] {
			return false, fmt.Sprintf("gateway span %s = %q, want %q", want[0], got, want[1])
		}
	}
	return true, ""
}
