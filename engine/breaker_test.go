package engine_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/promcp"
)

// noLeaks fails the test when goroutines it started are still running at its
// end. Goroutines wind down asynchronously after their last channel
// operation, so it polls (briefly) before failing.
func noLeaks(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			runtime.Gosched()
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutines leaked:\n%s", n-before, buf[:runtime.Stack(buf, true)])
		}
	})
}

func TestBreakerOpensFailsFastAndProbes(t *testing.T) {
	r := newTankRig(t)
	if got := r.read(t, "read_tank_level"); got.Quality != promcp.QualityGood {
		t.Fatalf("level: %+v", got)
	}
	r.net.setDown(2, true)
	// Each read misses the cache and tries the device until the breaker opens.
	for i := range engine.BreakerThreshold {
		r.clock.Advance(2 * time.Second)
		if got := r.read(t, "read_tank_level"); got.Quality != promcp.QualityStale {
			t.Fatalf("read %d with unit 2 down: want stale, got %+v", i, got)
		}
	}
	txs := r.net.transactions(2)
	r.clock.Advance(2 * time.Second)
	got := r.read(t, "read_tank_level")
	if got.Quality != promcp.QualityStale || !strings.Contains(got.Detail, "circuit breaker open") {
		t.Fatalf("read with the breaker open: %+v", got)
	}
	if mode := r.read(t, "read_tank_mode"); mode.Quality != promcp.QualityError || !strings.Contains(mode.Detail, "circuit breaker open") {
		t.Fatalf("another point of the same unit: %+v", mode)
	}
	b, ok := blockedFor(r.canDo(t, operator, promcp.Intent{SemanticTags: []string{"tank", "level"}, Action: "read"}), "read_tank_level")
	if !ok || b.Permission != promcp.SourceUnreachable || b.ClearsAt == "" {
		t.Fatalf("can_do with the breaker open: want blocked source_unreachable with clears_at, got %+v", b)
	}
	if resp := r.do(t, operator, "do_pump_run", true, ""); resp.Permission != promcp.SourceUnreachable {
		t.Fatalf("a write interlocked on the dead unit: %+v", resp)
	}
	if n := r.net.transactions(2); n != txs {
		t.Fatalf("the open breaker let %d transactions through to the device", n-txs)
	}
	// Unit 1 is another device: its breaker is closed.
	if resp := r.do(t, operator, "do_pump_run", false, ""); resp.Status != promcp.StatusSuccess {
		t.Fatalf("unit 1 must still work: %+v", resp)
	}

	// After the cool-off one probe goes through; it fails, so the breaker
	// opens again for another cool-off.
	r.clock.Advance(engine.BreakerCooloff)
	r.read(t, "read_tank_level")
	r.read(t, "read_tank_mode")
	if n := r.net.transactions(2); n != txs+1 {
		t.Fatalf("want exactly one probe, got %d transactions", n-txs)
	}
	// The device is back: the next probe succeeds and closes the breaker.
	r.net.setDown(2, false)
	r.clock.Advance(engine.BreakerCooloff)
	if got := r.read(t, "read_tank_level"); got.Quality != promcp.QualityGood {
		t.Fatalf("after the probe: %+v", got)
	}
	if got := r.read(t, "read_tank_mode"); got.Quality != promcp.QualityGood {
		t.Fatalf("breaker closed: %+v", got)
	}
	if resp := r.do(t, operator, "do_pump_run", true, ""); resp.Status != promcp.StatusSuccess {
		t.Fatalf("pump on after recovery: %+v", resp)
	}
}

// A success between failures resets the count: only consecutive failures open.
func TestBreakerCountsConsecutiveFailures(t *testing.T) {
	r := newTankRig(t)
	for range 3 {
		r.net.setDown(2, true)
		for range engine.BreakerThreshold - 1 {
			r.clock.Advance(2 * time.Second)
			r.read(t, "read_tank_level")
		}
		r.net.setDown(2, false)
		r.clock.Advance(2 * time.Second)
		if got := r.read(t, "read_tank_level"); got.Quality != promcp.QualityGood {
			t.Fatalf("the breaker opened before %d consecutive failures: %+v", engine.BreakerThreshold, got)
		}
	}
}

func TestDriverPanicFailsOnlyThatCall(t *testing.T) {
	noLeaks(t)
	r := newTankRig(t)
	r.net.setPanic(1, true)
	resp := r.do(t, operator, "do_inlet_valve", 20.0, "k1")
	if resp.Status != promcp.StatusFailed || resp.Permission != promcp.SourceUnreachable || !strings.Contains(resp.Reason, "driver panic") {
		t.Fatalf("do with a panicking driver: %+v", resp)
	}
	// Collapsed reads must not stay stuck behind the panicked transaction.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if got := r.read(t, "read_tank_level"); got.Quality != promcp.QualityGood {
				t.Errorf("unit 2 is fine: %+v", got)
			}
		})
	}
	wg.Wait()
	r.net.setPanic(1, false)
	if resp := r.do(t, operator, "do_inlet_valve", 20.0, "k2"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("after the panic: %+v", resp)
	}
}

// Concurrent calls with different keys take turns: a cooldown lets exactly
// one of them write.
func TestConcurrentWritesRespectTheCooldown(t *testing.T) {
	noLeaks(t)
	r := newRig(t)
	var wg sync.WaitGroup
	results := make(chan promcp.DoResponse, 40)
	for i := range 40 {
		wg.Go(func() { results <- r.do(t, operator, "do_boiler_setpoint", 30.0+float64(i%10), fmt.Sprint("key-", i)) })
	}
	wg.Wait()
	close(results)
	ok := 0
	for resp := range results {
		switch {
		case resp.Status == promcp.StatusSuccess:
			ok++
		case resp.Permission != promcp.CooldownActive && resp.Permission != promcp.RateLimited:
			t.Errorf("unexpected refusal: %+v", resp)
		}
	}
	if w := r.bus(t, "mb").Writes(); ok != 1 || w != 1 {
		t.Fatalf("a 10 s cooldown allows one write; got %d successes and %d writes", ok, w)
	}
}

// Reads, can_do and writes, some cancelled and some against a dead unit,
// leave no goroutine behind.
func TestMixedLoadLeavesNoGoroutines(t *testing.T) {
	noLeaks(t)
	r := newTankRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			switch i % 3 {
			case 0:
				_, _ = r.e.Read(ctx, operator, "read_tank_level")
			case 1:
				_, _ = r.e.CanDo(ctx, operator, promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"pump"}, Value: true}})
			default:
				_, _ = r.e.Do(ctx, operator, "do_pump_run", promcp.DoRequest{Value: i%2 == 0})
			}
		})
		if i == 25 {
			r.net.setDown(2, true)
			cancel()
		}
	}
	wg.Wait()
}
