package engine_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/engine"
)

// A device that stops answering is reported once as unreachable, once when
// its breaker opens (not again at each failed probe), and once when it
// answers again.
func TestDeviceEvents(t *testing.T) {
	r := newRig(t)
	var mu sync.Mutex
	var got []engine.DeviceEvent
	remove := r.e.OnDeviceEvent(func(ev engine.DeviceEvent) {
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
	})
	defer remove()
	changes := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, ev := range got {
			out = append(out, ev.Change)
		}
		return out
	}

	r.read(t, "read_water_temperature")
	r.bus(t, "i2c").SetOffline(true)
	for range engine.BreakerThreshold {
		r.clock.Advance(1100 * time.Millisecond) // past the cache TTL
		r.read(t, "read_water_temperature")
	}
	r.clock.Advance(engine.BreakerCooloff)
	r.read(t, "read_water_temperature") // the probe fails: the breaker opens again
	r.bus(t, "i2c").SetOffline(false)
	r.clock.Advance(engine.BreakerCooloff)
	r.read(t, "read_water_temperature")
	r.read(t, "read_water_temperature")

	want := []string{engine.DeviceUnreachable, engine.DeviceBreakerOpen, engine.DeviceReachable}
	if c := changes(); !slices.Equal(c, want) {
		t.Fatalf("changes %v, want %v", c, want)
	}
	mu.Lock()
	defer mu.Unlock()
	open := got[1].Health
	if open.State != engine.BreakerOpen || open.LastError == "" || !slices.Equal(open.Tools, []string{"read_water_temperature"}) || open.RetryAt.IsZero() {
		t.Errorf("breaker_open event %+v", open)
	}
	if back := got[2].Health; back.State != engine.BreakerClosed || back.Failures != 0 {
		t.Errorf("reachable event %+v", back)
	}
	if want := r.clock.Now().Add(-2*engine.BreakerCooloff - (engine.BreakerThreshold-1)*1100*time.Millisecond); !got[0].At.Equal(want) {
		t.Errorf("unreachable at %s, want %s", got[0].At.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
	}
}
