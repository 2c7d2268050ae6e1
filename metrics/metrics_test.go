package metrics_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/audit"
	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/metrics"
	"github.com/physmcp/physmcpd/promcp"
)

func exampleEngine(t *testing.T) *engine.Engine {
	t.Helper()
	e, _ := exampleRig(t)
	return e
}

// exampleRig is the example device on simulated buses, and the buses.
func exampleRig(t *testing.T) (*engine.Engine, map[string]drivers.Bus) {
	t.Helper()
	m, diags := manifest.Load("../examples/physmcp.manifest.yml")
	if m == nil {
		t.Fatalf("manifest: %s", diags)
	}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{}), true)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(m, nil, buses, engine.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, buses
}

type nopSender struct{}

func (nopSender) Send(context.Context, [][]byte) error { return nil }
func (nopSender) Close() error                         { return nil }

// fullSources has every optional source and a refusal counted, so that
// every metric is served.
func fullSources(t *testing.T) metrics.Sources {
	t.Helper()
	e := exampleEngine(t)
	if resp, err := e.Do(context.Background(), engine.Caller{Identity: "t", Role: manifest.RoleAdmin}, "do_heater_setpoint", promcp.DoRequest{Value: 40.0}); err != nil || resp.Permission != promcp.OutOfRange {
		t.Fatalf("do_heater_setpoint 40: %+v, %v", resp, err)
	}
	trail, err := audit.Open(t.TempDir(), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { trail.Close() })
	sh, err := audit.Ship(trail, nopSender{}, audit.ShipOptions{Sink: "nop"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Close() })
	return metrics.Sources{Engine: e, Trail: trail, Shipper: sh, Sessions: func() int { return 0 }}
}

// docs/metrics.md names exactly the physmcpd_* metrics served.
func TestDocsNameEveryMetric(t *testing.T) {
	fams, err := metrics.Registry(fullSources(t)).Gather()
	if err != nil {
		t.Fatal(err)
	}
	var served []string
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "physmcpd_") {
			served = append(served, f.GetName())
		}
	}
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(physmcpd_[a-z_]+)`").FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, m[1])
	}
	slices.Sort(served)
	slices.Sort(documented)
	if !slices.Equal(served, documented) {
		t.Errorf("served %v\ndocs/metrics.md documents %v", served, documented)
	}
}

func TestHandlerServesOnlyItsPath(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "next "+r.URL.Path) })
	srv := httptest.NewServer(metrics.Handler(metrics.Sources{Engine: exampleEngine(t)}, nil, next))
	defer srv.Close()
	resp, err := http.Get(srv.URL + metrics.Path)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") ||
		!strings.Contains(string(body), `physmcpd_tool_calls_total{tool="read_air_temperature",verb="read"} 0`) {
		t.Errorf("GET %s: %d %s\n%s", metrics.Path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if strings.Contains(string(body), "physmcpd_audit_") || strings.Contains(string(body), "physmcpd_mcp_sessions_open") {
		t.Error("metrics of sources not given are served")
	}
	resp, err = http.Post(srv.URL+metrics.Path, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST %s: %d", metrics.Path, resp.StatusCode)
	}
	resp, err = http.Get(srv.URL + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "next /mcp" {
		t.Errorf("GET /mcp: %q", body)
	}
}

// A device that stops answering shows in the bus errors, and its breaker as
// open (2) once it has failed engine.BreakerThreshold times in a row.
func TestBreakerAndBusErrors(t *testing.T) {
	e, buses := exampleRig(t)
	buses["rs485"].(interface{ SetOffline(bool) }).SetOffline(true)
	operator := engine.Caller{Identity: "t", Role: manifest.RoleOperator}
	for range engine.BreakerThreshold + 1 {
		if r, err := e.Read(context.Background(), operator, "read_heater_flow_temperature"); err != nil || r.Quality != promcp.QualityError {
			t.Fatalf("read with rs485 offline: %+v, %v", r, err)
		}
	}
	fams, err := metrics.Registry(metrics.Sources{Engine: e}).Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		`physmcpd_breaker_state{bus="rs485",device="rs485 unit 1"}`:                        2,
		`physmcpd_breaker_consecutive_failures{bus="rs485",device="rs485 unit 1"}`:         engine.BreakerThreshold,
		`physmcpd_bus_errors_total{bus="rs485",kind="unreachable"}`:                        engine.BreakerThreshold,
		`physmcpd_bus_errors_total{bus="rs485",kind="circuit_open"}`:                       1,
		`physmcpd_bus_transactions_total{bus="rs485",op="read"}`:                           engine.BreakerThreshold,
		`physmcpd_read_quality_total{quality="error",tool="read_heater_flow_temperature"}`: engine.BreakerThreshold + 1,
		`physmcpd_breaker_state{bus="i2c1",device="i2c1 address 0x48"}`:                    0,
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			key := f.GetName() + "{" + strings.Join(labels, ",") + "}"
			w, ok := want[key]
			if !ok {
				continue
			}
			delete(want, key)
			got := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			if got != w {
				t.Errorf("%s = %v, want %v", key, got, w)
			}
		}
	}
	for key := range want {
		t.Errorf("%s missing", key)
	}
}
