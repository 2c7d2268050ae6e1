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
	return e
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
