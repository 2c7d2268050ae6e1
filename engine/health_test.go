package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/testclock"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// stallingModbus is a bus whose register reads, once stalled, never return
// until released, whatever their context says: a driver stuck in the kernel.
type stallingModbus struct {
	drivers.ModbusBus
	mu      sync.Mutex
	stall   chan struct{} // non-nil: reads block until it is closed
	entered chan struct{} // receives one value per stalled read
}

func (s *stallingModbus) stallReads() {
	s.mu.Lock()
	s.stall = make(chan struct{})
	s.mu.Unlock()
}

func (s *stallingModbus) release() {
	s.mu.Lock()
	close(s.stall)
	s.stall = nil
	s.mu.Unlock()
}

func (s *stallingModbus) ReadRegisters(ctx context.Context, unit uint8, t manifest.ModbusTable, addr, n uint16) ([]uint16, error) {
	s.mu.Lock()
	stall := s.stall
	s.mu.Unlock()
	if stall != nil {
		s.entered <- struct{}{}
		<-stall
	}
	return s.ModbusBus.ReadRegisters(ctx, unit, t, addr, n)
}

type healthRig struct {
	e      *engine.Engine
	clock  *testclock.Clock
	bus    *stallingModbus
	sim    simBus
	synced atomic.Bool
}

func newHealthRig(t *testing.T) *healthRig {
	t.Helper()
	m, diags := manifest.Load("testdata/tank.manifest.yml")
	if m == nil {
		t.Fatalf("manifest: %s", diags)
	}
	r := &healthRig{clock: testclock.New(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))}
	r.synced.Store(true)
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{Now: r.clock.Now}), true)
	if err != nil {
		t.Fatal(err)
	}
	r.sim = buses["plc"].(simBus)
	r.bus = &stallingModbus{ModbusBus: buses["plc"].(drivers.ModbusBus), entered: make(chan struct{}, 1)}
	r.e, err = engine.New(m, nil, map[string]drivers.Bus{"plc": r.bus}, engine.Options{Now: r.clock.Now, Logger: quiet, ClockSynced: r.synced.Load})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.e.Close() })
	return r
}

func (r *healthRig) health() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.e.Health(ctx)
}

func (r *healthRig) read(t *testing.T, tool string) promcp.ReadResponse {
	t.Helper()
	resp, err := r.e.Read(context.Background(), operator, tool)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A transaction still running WedgeMargin past its timeout makes the engine
// unhealthy, named in the reason; once it returns the engine is healthy again.
func TestHealthFindsAWedgedTransaction(t *testing.T) {
	r := newHealthRig(t)
	if err := r.health(); err != nil {
		t.Fatalf("idle engine: %v", err)
	}
	r.bus.stallReads()
	done := make(chan promcp.ReadResponse)
	go func() {
		resp, _ := r.e.Read(context.Background(), operator, "read_tank_level")
		done <- resp
	}()
	<-r.bus.entered
	timeout := 5 * time.Second // the manifest's default timeout_ms
	r.clock.Advance(timeout + engine.WedgeMargin)
	if err := r.health(); err != nil {
		t.Fatalf("a transaction at its timeout plus the margin is not wedged yet: %v", err)
	}
	r.clock.Advance(time.Millisecond)
	err := r.health()
	if !errors.Is(err, engine.ErrUnhealthy) || !strings.Contains(err.Error(), "read_tank_level") || !strings.Contains(err.Error(), "wedged") {
		t.Fatalf("a transaction past its timeout plus the margin: got %v", err)
	}
	r.bus.release()
	<-done
	if err := r.health(); err != nil {
		t.Fatalf("after the transaction returned: %v", err)
	}
}

// Readings taken while the system clock is not synchronised are degraded
// with the reason, good again once it is, and a stale fallback keeps the
// caveat of when it was taken.
func TestReadingsWhileTheClockIsNotSynchronised(t *testing.T) {
	r := newHealthRig(t)
	r.synced.Store(false)
	got := r.read(t, "read_tank_level")
	if got.Quality != promcp.QualityDegraded || got.Detail != engine.ClockUnsynced || got.Value != 50.0 {
		t.Fatalf("clock not synchronised: want degraded %q with the value, got %+v", engine.ClockUnsynced, got)
	}
	r.synced.Store(true)
	r.sim.SetOffline(true)
	r.clock.Advance(2 * time.Second) // past the cache TTL
	got = r.read(t, "read_tank_level")
	if got.Quality != promcp.QualityStale || !strings.HasSuffix(got.Detail, "; "+engine.ClockUnsynced) {
		t.Fatalf("stale value taken before the clock was set: want stale with the caveat, got %+v", got)
	}
	r.sim.SetOffline(false)
	if got = r.read(t, "read_tank_level"); got.Quality != promcp.QualityGood || got.Detail != "" {
		t.Fatalf("clock synchronised: want good, got %+v", got)
	}
}

// A watch's first read wedged in its driver holds neither another watch's
// Stop nor StopWatches beyond their bound (the capability's timeout and the
// wedge margin). Before, Watch took its first read under the watcher's
// lock, which both wait for: they waited as long as the driver did.
func TestStopDoesNotWaitForAWedgedFirstRead(t *testing.T) {
	defer engine.SetPollWedgeMargin(50 * time.Millisecond)()
	r := newHealthRig(t)
	// polled once an hour: its watcher's polls stay off the bus here
	w, err := r.e.Watch(context.Background(), operator, "read_tank_level", engine.WatchOptions{MinInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r.bus.stallReads()
	r.clock.Advance(time.Hour) // the reading has aged: the next watch's first read goes to the bus
	defer r.bus.release()      // before the rig's Close
	go func() {
		if _, err := r.e.Watch(context.Background(), operator, "read_tank_level", engine.WatchOptions{}); err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-r.bus.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the second watch's first read did not reach the bus in 20 s")
	}
	stopsWithin(t, 20*time.Second, "Stop", w.Stop)
	stopsWithin(t, 20*time.Second, "StopWatches", r.e.StopWatches)
}

// stopsWithin fails t unless stop returns within bound: the test's hang
// guard, above the tank's 5 s timeout and the wedge margin set.
func stopsWithin(t *testing.T, bound time.Duration, name string, stop func()) {
	t.Helper()
	returned := make(chan struct{})
	go func() {
		stop()
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(bound):
		t.Fatalf("%s still waits for the wedged read after %s", name, bound)
	}
}

// A poll wedged in its driver (a read that ignores its context) holds
// neither Watch.Stop nor StopWatches for good: past the capability's timeout
// and the wedge margin they stop waiting for it, so that a session can end
// and the shutdown's safe state is written.
func TestStopDoesNotWaitForAWedgedPoll(t *testing.T) {
	defer engine.SetPollWedgeMargin(50 * time.Millisecond)()
	r := newHealthRig(t)
	w, err := r.e.Watch(context.Background(), operator, "read_tank_level", engine.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.bus.stallReads() // the watcher's next poll, once the reading it has aged
	r.clock.Advance(time.Hour)
	defer r.bus.release() // before the rig's Close
	select {
	case <-r.bus.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("no poll in 20 s")
	}
	stopsWithin(t, 20*time.Second, "Stop", w.Stop)
	stopsWithin(t, 20*time.Second, "StopWatches", r.e.StopWatches)
}
