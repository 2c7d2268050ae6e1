package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/testclock"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// outSource is an adopted source whose outage the test sets, as the adopt
// driver reports it (drivers.Outage).
type outSource struct {
	mu    sync.Mutex
	now   func() time.Time
	value float64
	out   bool
	since time.Duration // how long it has been out
}

func (s *outSource) Describe() string { return "a source the test controls" }
func (s *outSource) Close() error     { return nil }
func (s *outSource) BindVirtual(*manifest.Capability, drivers.BindOptions) (drivers.Point, error) {
	return s, nil
}

func (s *outSource) Read(context.Context) (drivers.Sample, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out {
		return drivers.Sample{}, fmt.Errorf("the line closed: %w", drivers.ErrUnreachable)
	}
	return drivers.Sample{Value: s.value, At: s.now(), Source: "node_01"}, nil
}

func (s *outSource) Write(context.Context, drivers.Value) error      { return drivers.ErrNotWritable }
func (s *outSource) Quantise(v drivers.Value) (drivers.Value, error) { return v, nil }

func (s *outSource) OutFor() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.since, s.out
}

func (s *outSource) set(out bool, since time.Duration) {
	s.mu.Lock()
	s.out, s.since = out, since
	s.mu.Unlock()
}

const adoptedManifest = `physmcp_version: "0.1"
profile: proxy
device: {id: controller_01, type: controller}
buses:
  node: {type: mcp, port: /dev/ttyUSB1, baud: 115200}
capabilities:
  - name: bed_temperature
    kind: read
    description: The bed's temperature, from the node on the serial line.
    binding: {bus: node, type: virtual, tool: read_soil_temperature}
    data_type: float
    unit: "°C"
    semantic_tags: [temperature, bed]
    cache_ttl_ms: 500
`

// An adopted value whose source is known to be gone is stale at once, even
// inside its cache TTL, then error once the source has been out for one
// TTL (not the minute a local device's value is kept), and good again when
// the source answers; can_do blocks it as unreachable meanwhile.
func TestAdoptedSourceOutIsStaleThenErrorWithinTheTTL(t *testing.T) {
	m, diags := manifest.Parse("proxy.yml", []byte(adoptedManifest))
	if m == nil {
		t.Fatal(diags)
	}
	clk := testclock.New(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	src := &outSource{now: clk.Now, value: 17.25}
	e, err := engine.New(m, nil, map[string]drivers.Bus{"node": src}, engine.Options{Now: clk.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	read := func() promcp.ReadResponse {
		t.Helper()
		resp, err := e.Read(context.Background(), operator, "read_bed_temperature")
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	ttl := m.Capabilities[0].CacheTTL()
	first := read()
	if first.Quality != promcp.QualityGood || first.Value != 17.25 {
		t.Fatalf("first read %+v", first)
	}

	src.set(true, 0) // the transport reports the line closed
	clk.Advance(ttl / 5)
	if got := read(); got.Quality != promcp.QualityStale || got.Value != 17.25 || got.Timestamp != first.Timestamp || got.Source != "node_01" {
		t.Errorf("source out, inside the cache TTL: %+v; want the last value as stale, not the cache as good", got)
	}
	rep, err := e.CanDo(context.Background(), operator, promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"bed", "temperature"}, Action: "read"}})
	if err != nil {
		t.Fatal(err)
	}
	if perm, _ := permissionFor(rep, "read_bed_temperature"); perm != promcp.SourceUnreachable {
		t.Errorf("can_do with the source out: %s in %+v; want source_unreachable", perm, rep)
	}
	// The source was read for can_do and failed at once: consulted, neither
	// answered nor late (the mesh counts a refused connection so).
	if mm := rep.Metadata.MeshMetadata; mm == nil || mm.CoordinatorNode != "controller_01" || mm.PeersConsulted != 1 ||
		mm.ResponsesReceived != 0 || mm.ResponsesDroppedLate != 0 || mm.MeshSizeEstimate != 2 {
		t.Errorf("can_do metadata with the source out: %+v", mm)
	}
	src.set(true, ttl-time.Millisecond)
	if got := read(); got.Quality != promcp.QualityStale {
		t.Errorf("out for just under the TTL: %+v; want stale", got)
	}
	src.set(true, ttl)
	if got := read(); got.Quality != promcp.QualityError || got.Value != nil {
		t.Errorf("out for the TTL: %+v; want error", got)
	}

	src.mu.Lock()
	src.value = 18.5
	src.mu.Unlock()
	src.set(false, 0)
	clk.Advance(engine.BreakerCooloff) // the reads above opened the breaker
	if got := read(); got.Quality != promcp.QualityGood || got.Value != 18.5 {
		t.Errorf("the source back: %+v; want good", got)
	}

	// A device that asked no other has no mesh metadata.
	if mm := newRig(t).canDo(t, operator, promcp.Intent{SemanticTags: []string{"temperature"}}).Metadata.MeshMetadata; mm != nil {
		t.Errorf("a local can_do has mesh metadata %+v", mm)
	}
}
