//go:build !lite

package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/metrics"
)

const (
	exampleOperatorToken = "operator-example-token-do-not-use"
	exampleViewerToken   = "viewer-example-token-do-not-use"
)

// scrape GETs /metrics with token ("" for none); families is nil unless 200.
func scrape(t *testing.T, base, token string) (int, map[string]*dto.MetricFamily) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+metrics.Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s does not parse as the Prometheus text format: %v", metrics.Path, err)
	}
	return resp.StatusCode, fams
}

// sample is the value of the metric of family name whose labels include
// labels: a counter's or gauge's value, a histogram's count. It fails the
// test when there is none.
func sample(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	if v, ok := lookup(fams, name, labels); ok {
		return v
	}
	t.Fatalf("no %s%v in the scrape", name, labels)
	return 0
}

func lookup(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// httpClient is an MCP client over streamable HTTP with token.
func httpClient(t *testing.T, base, token string) *client.Client {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(base+mcpserver.EndpointPath, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	if err != nil {
		t.Fatal(err)
	}
	return dialMCP(t, tr)
}

// TestMetricsCountRealCalls serves the example over HTTP, makes MCP calls
// and checks that /metrics, parsed as Prometheus does, counts them.
func TestMetricsCountRealCalls(t *testing.T) {
	base := startServe(t, serveExampleManifest, serveExamplePolicy, "--state-dir", t.TempDir())
	// The token of /mcp, any role.
	if code, _ := scrape(t, base, ""); code != http.StatusUnauthorized {
		t.Fatalf("%s without a token: %d, want 401", metrics.Path, code)
	}
	if code, _ := scrape(t, base, "not-a-token"); code != http.StatusUnauthorized {
		t.Fatalf("%s with an unknown token: %d, want 401", metrics.Path, code)
	}
	code, before := scrape(t, base, exampleViewerToken)
	if code != http.StatusOK {
		t.Fatalf("%s with the viewer's token: %d", metrics.Path, code)
	}

	op := httpClient(t, base, exampleOperatorToken)
	for range 2 {
		if r := answer(t, op, "read_air_temperature", nil); r["quality"] != "good" {
			t.Fatalf("read: %v", r)
		}
	}
	// (The heater is in its cooldown: serve wrote its safe value at start.)
	if r := answer(t, op, "do_vent_fan", map[string]any{"value": true, "idempotency_key": "metrics-1"}); r["status"] != "success" {
		t.Fatalf("do: %v", r)
	}
	if r := answer(t, op, "do_vent_fan", map[string]any{"value": true, "idempotency_key": "metrics-1"}); r["status"] != "success" {
		t.Fatalf("replay: %v", r)
	}
	if r := answer(t, op, "do_heater_setpoint", map[string]any{"value": 40.0}); r["permission"] != "out_of_range" {
		t.Fatalf("do out of range: %v", r)
	}
	viewer := httpClient(t, base, exampleViewerToken)
	if _, err := callTool(t, viewer, "do_vent_fan", map[string]any{"value": false}); err == nil {
		t.Fatal("the viewer's do_vent_fan was not refused")
	}

	// The clients above speak the newest protocol, which has no sessions;
	// one of an older protocol opens one.
	initialize, err := http.NewRequest(http.MethodPost, base+mcpserver.EndpointPath, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	initialize.Header.Set("Content-Type", "application/json")
	initialize.Header.Set("Accept", "application/json, text/event-stream")
	initialize.Header.Set("Authorization", "Bearer "+exampleViewerToken)
	resp, err := http.DefaultClient.Do(initialize)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
		t.Fatalf("initialize 2025-03-26: %d, session %q", resp.StatusCode, resp.Header.Get("Mcp-Session-Id"))
	}

	_, after := scrape(t, base, exampleViewerToken)
	delta := func(name string, labels map[string]string) float64 {
		t.Helper()
		v := sample(t, after, name, labels)
		if old, ok := lookup(before, name, labels); ok {
			v -= old
		}
		return v
	}
	temp := map[string]string{"tool": "read_air_temperature"}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"physmcpd_tool_calls_total", map[string]string{"tool": "read_air_temperature", "verb": "read"}, 2},
		{"physmcpd_read_quality_total", map[string]string{"tool": "read_air_temperature", "quality": "good"}, 2},
		// The HTTP edge refused the viewer's call: it never reached the engine.
		{"physmcpd_tool_calls_total", map[string]string{"tool": "do_vent_fan", "verb": "do"}, 2},
		{"physmcpd_tool_calls_total", map[string]string{"tool": "do_heater_setpoint", "verb": "do"}, 1},
		{"physmcpd_tool_refusals_total", map[string]string{"tool": "do_heater_setpoint", "permission": "out_of_range"}, 1},
		{"physmcpd_tool_refusals_total", map[string]string{"tool": "do_vent_fan", "permission": "permission_insufficient"}, 1},
		{"physmcpd_idempotent_replays_total", map[string]string{"tool": "do_vent_fan"}, 1},
		{"physmcpd_tool_call_duration_seconds", map[string]string{"verb": "read"}, 2},
		{"physmcpd_tool_call_duration_seconds", map[string]string{"verb": "do"}, 3},
		{"physmcpd_tool_call_duration_seconds", map[string]string{"verb": "can_do"}, 0},
		// The write, once: the replay and the refusals sent nothing.
		{"physmcpd_bus_transactions_total", map[string]string{"bus": "gpio", "op": "write"}, 1},
		{"physmcpd_bus_transactions_total", map[string]string{"bus": "rs485", "op": "write"}, 0},
		// Every do_* attempt is audited: the replay, the refusal and the
		// call the HTTP edge refused too.
		{"physmcpd_audit_lines_written_total", nil, 4},
	} {
		if got := delta(c.name, c.labels); got != c.want {
			t.Errorf("%s%v went up by %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if hits, misses := delta("physmcpd_read_cache_hits_total", temp), delta("physmcpd_read_cache_misses_total", temp); hits+misses != 2 || misses < 1 {
		t.Errorf("read_air_temperature: %v cache hits, %v misses; want 2 reads, the first a miss", hits, misses)
	}
	txs := delta("physmcpd_bus_transactions_total", map[string]string{"bus": "gpio", "op": "read"}) + 1
	if got := delta("physmcpd_bus_transaction_duration_seconds", map[string]string{"bus": "gpio"}); got != txs || txs < 3 {
		t.Errorf("gpio: %v transactions timed, %v made (at least the read before the write, the write, the read-back)", got, txs)
	}
	for name, want := range map[string]float64{
		"physmcpd_mcp_sessions_open": 1,
		"physmcpd_build_info":        1,
	} {
		if got := sample(t, after, name, nil); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := sample(t, after, "physmcpd_breaker_state", map[string]string{"bus": "rs485", "device": "rs485 unit 1"}); got != 0 {
		t.Errorf("rs485 unit 1's breaker: %v, want 0 (closed)", got)
	}
	if got := sample(t, after, "physmcpd_bus_errors_total", map[string]string{"bus": "rs485", "kind": "timeout"}); got != 0 {
		t.Errorf("rs485 timeouts: %v", got)
	}
	if _, ok := after["go_goroutines"]; !ok {
		t.Error("the Go runtime's metrics are missing")
	}
	if _, ok := after["physmcpd_audit_sink_up"]; ok {
		t.Error("audit_sink_up without a remote sink")
	}
}

// With --metrics-public, /metrics needs no token; /mcp still does.
func TestMetricsPublic(t *testing.T) {
	base := startServe(t, serveExampleManifest, serveExamplePolicy, "--metrics-public")
	code, fams := scrape(t, base, "")
	if code != http.StatusOK {
		t.Fatalf("%s without a token under --metrics-public: %d", metrics.Path, code)
	}
	if got := sample(t, fams, "physmcpd_tool_calls_total", map[string]string{"tool": "can_do"}); got != 0 {
		t.Errorf("can_do calls: %v", got)
	}
	if _, ok := fams["physmcpd_audit_lines_written_total"]; ok {
		t.Error("audit lines counted without an audit trail (no --state-dir)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+mcpserver.EndpointPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("%s without a token under --metrics-public: %d, want 401", mcpserver.EndpointPath, resp.StatusCode)
	}
}

func TestMetricsPublicNeedsHTTP(t *testing.T) {
	var stderr serveLogBuffer
	if _, code := parseServe([]string{"--manifest", serveExampleManifest, "--stdio", "--metrics-public"}, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "--metrics-public serves /metrics over HTTP: it needs --http") {
		t.Errorf("--metrics-public with --stdio: exit %d, stderr %q", code, stderr.String())
	}
}
