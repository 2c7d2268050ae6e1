package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

func watch(t *testing.T, e *engine.Engine, tool string, opts engine.WatchOptions) *engine.Watch {
	t.Helper()
	w, err := e.Watch(context.Background(), operator, tool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

// next waits for the watch's next update.
func next(t *testing.T, w *engine.Watch) promcp.ReadResponse {
	t.Helper()
	select {
	case r, ok := <-w.Updates:
		if !ok {
			t.Fatal("Updates closed")
		}
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no update within 5 s")
	}
	panic("unreachable")
}

// quiet fails when the watch reports anything within d. The engine's clock
// stands still in these tests, so a held change cannot come due meanwhile.
func quietFor(t *testing.T, w *engine.Watch, d time.Duration) {
	t.Helper()
	select {
	case r := <-w.Updates:
		t.Fatalf("unexpected update %+v", r)
	case <-time.After(d):
	}
}

// change sets water_temperature on the simulated device and has an ordinary
// read observe it (the cache TTL is 1 s of the rig's clock).
func (r *rig) change(t *testing.T, v float64) {
	t.Helper()
	if err := r.bus(t, "i2c").SetValue("water_temperature", v); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(1100 * time.Millisecond)
	if got := r.read(t, "read_water_temperature"); got.Value != v {
		t.Fatalf("read %v after setting %v", got.Value, v)
	}
}

func TestWatchDeadband(t *testing.T) {
	r := newRig(t)
	r.change(t, 20)
	w := watch(t, r.e, "read_water_temperature", engine.WatchOptions{Deadband: 1})
	if w.First.Value != 20.0 || w.First.Quality != promcp.QualityGood {
		t.Fatalf("first reading %+v", w.First)
	}
	r.change(t, 20.5) // within the deadband of 20
	quietFor(t, w, 200*time.Millisecond)
	r.change(t, 22)
	if got := next(t, w); got.Value != 22.0 {
		t.Fatalf("update %v, want 22 (20.5 is within the deadband)", got.Value)
	}
	r.change(t, 22.5) // within the deadband of 22, the last reported
	r.change(t, 21.5) // so is this
	quietFor(t, w, 200*time.Millisecond)
	r.change(t, 20.5) // and this is beyond it
	if got := next(t, w); got.Value != 20.5 {
		t.Fatalf("update %v, want 20.5", got.Value)
	}
	quietFor(t, w, 200*time.Millisecond)
}

func TestWatchMinInterval(t *testing.T) {
	r := newRig(t)
	r.change(t, 20)
	w := watch(t, r.e, "read_water_temperature", engine.WatchOptions{MinInterval: 10 * time.Second})
	r.change(t, 21)
	if got := next(t, w); got.Value != 21.0 {
		t.Fatalf("update %v, want 21 at once (nothing reported yet)", got.Value)
	}
	r.change(t, 22)
	r.change(t, 23)
	quietFor(t, w, 300*time.Millisecond) // 2.2 s of the interval's 10 have passed
	r.clock.Advance(8 * time.Second)
	r.read(t, "read_water_temperature")
	if got := next(t, w); got.Value != 23.0 {
		t.Fatalf("update %v, want the latest (23) once the interval ended", got.Value)
	}
	quietFor(t, w, 200*time.Millisecond)
}

func TestWatchQualityChange(t *testing.T) {
	r := newRig(t)
	r.change(t, 20)
	w := watch(t, r.e, "read_water_temperature", engine.WatchOptions{Deadband: 5})
	r.bus(t, "i2c").SetOffline(true)
	r.clock.Advance(1100 * time.Millisecond)
	r.read(t, "read_water_temperature")
	got := next(t, w)
	if got.Quality != promcp.QualityStale || got.Value != 20.0 {
		t.Fatalf("update %+v, want the last value as stale", got)
	}
}

// A write through the engine is reported by the watch of a read capability
// on the same register without waiting for a poll (an hour away here).
func TestWatchSeesWrites(t *testing.T) {
	r := newRig(t)
	w := watch(t, r.e, "read_boiler_setpoint", engine.WatchOptions{MinInterval: time.Hour})
	if w.First.Value != 40.0 {
		t.Fatalf("first %v", w.First.Value)
	}
	if resp := r.do(t, operator, "do_boiler_setpoint", 55.0, ""); resp.Status != promcp.StatusSuccess {
		t.Fatalf("do: %+v", resp)
	}
	if got := next(t, w); got.Value != 55.0 {
		t.Fatalf("update %v, want 55", got.Value)
	}
}

func TestWatchRefusals(t *testing.T) {
	r := newRig(t)
	if _, err := r.e.Watch(context.Background(), operator, "do_boiler_setpoint", engine.WatchOptions{}); !errors.Is(err, engine.ErrUnknownTool) {
		t.Errorf("watching a do_: %v", err)
	}
	stranger := engine.Caller{Identity: "x", Role: "stranger"}
	if _, err := r.e.Watch(context.Background(), stranger, "read_water_temperature", engine.WatchOptions{}); !errors.Is(err, engine.ErrNotPermitted) {
		t.Errorf("a caller who may not read: %v", err)
	}
	if _, err := r.e.Watch(context.Background(), operator, "read_water_temperature", engine.WatchOptions{Deadband: -1}); err == nil {
		t.Error("a negative deadband was accepted")
	}
	if n := r.e.Watches(); n != 0 {
		t.Errorf("%d watches after refusals", n)
	}
}

// The device is polled while somebody watches, and not at all otherwise.
// The test runs in a synctest bubble: the watcher's timers and the bus's
// latency run on the bubble's clock, which moves only once every goroutine
// of the test waits, so each check spans exactly the poll periods it names,
// whatever the machine's load.
func TestWatchPollsOnlyWhileWatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "m.yml")
		if err := os.WriteFile(path, []byte(`physmcp_version: "0.1"
device: {id: poll_rig, type: test}
buses:
  i2c: {type: i2c, device: "1", simulated: true}
capabilities:
  - name: level
    kind: read
    description: Tank level.
    binding: {bus: i2c, address: "0x48:reg=0x00:width=2:byte_order=big"}
    data_type: int
    unit: "mm"
    cache_ttl_ms: 100
    semantic_tags: [tank]
`), 0o644); err != nil {
			t.Fatal(err)
		}
		m, diags := manifest.Load(path)
		if m == nil || diags.HasErrors() {
			t.Fatalf("manifest: %v", diags)
		}
		buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{}), true)
		if err != nil {
			t.Fatal(err)
		}
		e, err := engine.New(m, nil, buses, engine.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		bus := buses["i2c"].(simBus)
		const period = 100 * time.Millisecond // the poll period: cache_ttl_ms
		// transactions is how many transactions began in d of the bubble's
		// time, once everything begun before has settled.
		transactions := func(d time.Duration) int64 {
			synctest.Wait()
			before := bus.Transactions()
			time.Sleep(d)
			synctest.Wait()
			return bus.Transactions() - before
		}
		if n := transactions(10 * period); n != 0 {
			t.Errorf("before any watch: %d bus transactions in 10 poll periods", n)
		}

		w := watch(t, e, "read_level", engine.WatchOptions{})
		if n := transactions(10 * period); n < 9 {
			t.Errorf("while watched: %d bus transactions in 10 poll periods, want a poll each", n)
		}
		// Stop while a poll is on the wire: it returns once the poll has ended.
		bus.SetLatency(2 * period)
		time.Sleep(period) // the next poll begins, and lasts two periods
		synctest.Wait()
		if begun, ended := bus.Transactions(), finished(e); begun <= ended {
			t.Fatalf("no poll under way a period after the last (%d begun, %d ended)", begun, ended)
		}
		w.Stop()
		if begun, ended := bus.Transactions(), finished(e); begun != ended {
			t.Errorf("Stop returned with %d of %d transactions ended", ended, begun)
		}
		w.Stop()
		for range w.Updates { // what was delivered before Stop, then closed
		}
		if n := e.Watches(); n != 0 {
			t.Errorf("%d watches after Stop", n)
		}
		if n := transactions(10 * period); n != 0 {
			t.Errorf("after the watch stopped: %d bus transactions in 10 poll periods", n)
		}

		// StopWatches (shutdown, Close) too returns once the polls under way
		// have ended, so that the safe state and the buses' closing come after
		// them, and starts none again.
		watch(t, e, "read_level", engine.WatchOptions{})
		time.Sleep(period)
		synctest.Wait()
		if begun, ended := bus.Transactions(), finished(e); begun <= ended {
			t.Fatalf("no poll under way a period after the watch began (%d begun, %d ended)", begun, ended)
		}
		e.StopWatches()
		if begun, ended := bus.Transactions(), finished(e); begun != ended {
			t.Errorf("StopWatches returned with %d of %d transactions ended", ended, begun)
		}
		if _, err := e.Watch(context.Background(), operator, "read_level", engine.WatchOptions{}); !errors.Is(err, engine.ErrWatchesStopped) {
			t.Errorf("Watch after StopWatches: %v, want ErrWatchesStopped", err)
		}
		if n := transactions(10 * period); n != 0 {
			t.Errorf("after StopWatches: %d bus transactions in 10 poll periods", n)
		}
	})
}

// finished is the number of transactions the engine's buses have ended.
func finished(e *engine.Engine) int64 {
	var n uint64
	for _, b := range e.Stats().Buses {
		n += b.Reads + b.Writes
	}
	return int64(n)
}
