package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

// After the cool-off exactly one of many concurrent callers is let through
// as the probe.
func TestBreakerAdmitsOneProbe(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	d := &device{name: "plc unit 2"}
	for range BreakerThreshold {
		d.record(now, drivers.ErrTimeout)
	}
	if err := d.admit(now); !errors.Is(err, ErrCircuitOpen) || !errors.Is(err, drivers.ErrUnreachable) {
		t.Fatalf("open breaker admitted: %v", err)
	}
	later := now.Add(BreakerCooloff)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for range 20 {
		wg.Go(func() {
			if d.admit(later) == nil {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if admitted != 1 {
		t.Fatalf("%d probes admitted, want 1", admitted)
	}
	// A probe that learnt nothing (refused before the bus) lets the next call probe.
	d.record(later, drivers.ErrNotWritable)
	if err := d.admit(later); err != nil {
		t.Fatalf("after a neutral probe: %v", err)
	}
	d.record(later, nil)
	if err := d.admit(later); err != nil || d.state != closed {
		t.Fatalf("a successful probe must close the breaker: %v", err)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want outcome
	}{
		{nil, answered},
		{&drivers.ModbusException{Function: 3, Code: 2}, answered},
		{&drivers.ModbusException{Function: 3, Code: 11}, failed},
		{drivers.ErrTimeout, failed},
		{context.DeadlineExceeded, failed},
		{errors.New("connection reset by peer"), failed},
		{drivers.ErrOutOfRange, neutral},
		{context.Canceled, neutral},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// blockingPoint holds every transaction until released.
type blockingPoint struct{ release chan struct{} }

func (b blockingPoint) Read(context.Context) (drivers.Sample, error) {
	<-b.release
	return drivers.Sample{Value: 1.0}, nil
}
func (b blockingPoint) Write(context.Context, drivers.Value) error      { return nil }
func (b blockingPoint) Describe() string                                { return "blocking point" }
func (b blockingPoint) Quantise(v drivers.Value) (drivers.Value, error) { return v, nil }

// No more than MaxQueued transactions wait for one device; the next fails at once.
func TestDeviceQueueIsBounded(t *testing.T) {
	c := &manifest.Capability{Name: "level", Kind: manifest.KindRead, Binding: manifest.Binding{Bus: "plc", Modbus: &manifest.ModbusBinding{Unit: 2}}}
	bp := blockingPoint{release: make(chan struct{})}
	e := &Engine{now: time.Now, log: slog.New(slog.DiscardHandler)}
	pt := &point{c: c, tool: "read_level", drv: bp, bus: &busCounters{}}
	var wg sync.WaitGroup
	started := make(chan struct{}, MaxQueued)
	for range MaxQueued {
		wg.Go(func() {
			_ = e.transact(context.Background(), pt, opRead, func(ctx context.Context) error {
				started <- struct{}{}
				_, err := bp.Read(ctx)
				return err
			})
		})
	}
	for range MaxQueued {
		<-started
	}
	err := e.transact(context.Background(), pt, opRead, func(context.Context) error { return nil })
	if !errors.Is(err, ErrDeviceBusy) {
		t.Fatalf("transaction %d: want ErrDeviceBusy, got %v", MaxQueued+1, err)
	}
	close(bp.release)
	wg.Wait()
	if err := e.transact(context.Background(), pt, opRead, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("after the queue drained: %v", err)
	}
}
