package adopt

import (
	"context"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
)

// A capability's source is out from the first read that gave no value (a
// source answering quality error, or one that is gone) until a read gives
// one again, and the outage is the bus's for every capability once the
// source stops answering at all.
func TestOutFromTheFirstReadWithoutAValue(t *testing.T) {
	src := newSource(t)
	b := src.bus(t)
	p := bind(t, b, readT).(drivers.Outage)
	other := bind(t, b, doX).(drivers.Outage)
	good := map[string]any{"value": 1.0, "timestamp": time.Now().Format(time.RFC3339Nano), "quality": "good"}
	src.set(func() { src.read = good })
	if _, err := p.(drivers.Point).Read(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, out := p.OutFor(); out {
		t.Fatal("out after a good read")
	}

	src.set(func() { src.read = map[string]any{"value": nil, "quality": "error", "detail": "sensor gone"} })
	p.(drivers.Point).Read(context.Background())
	time.Sleep(20 * time.Millisecond)
	p.(drivers.Point).Read(context.Background())
	if d, out := p.OutFor(); !out || d < 20*time.Millisecond {
		t.Errorf("answering quality error: out %v for %v; want out since the first such answer", out, d)
	}
	if _, out := other.OutFor(); out {
		t.Error("another capability of a source that answers is out")
	}

	src.set(func() { src.read = good })
	if _, err := p.(drivers.Point).Read(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, out := p.OutFor(); out {
		t.Error("out after the source gave a value again")
	}

	src.srv.Close() // the source goes away
	if _, err := p.(drivers.Point).Read(context.Background()); err == nil {
		t.Fatal("read from a closed source succeeded")
	}
	if _, out := other.OutFor(); !out {
		t.Error("the source does not answer, yet another of its capabilities is not out")
	}
}
