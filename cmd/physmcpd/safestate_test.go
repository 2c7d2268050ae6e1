package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// wedgeManifest has two Modbus actuators with safe values and a dead man;
// the safe state writes the heater first.
const wedgeManifest = `physmcp_version: "0.1"
device: {id: wedge_rig, type: test_rig}
buses:
  mb: {type: modbus-tcp, address: 127.0.0.1:1502, simulated: true}
safe_state: {dead_man_timeout_ms: 1000}
capabilities:
  - name: heater
    kind: do
    description: Heater power.
    binding: {bus: mb, unit: 1, table: holding, address: 4, data_type: uint16}
    data_type: int
    unit: "%"
    range: {min: 0, max: 100}
    semantic_tags: [heater]
    side_effects: [the heater heats]
    safe_value: 0
  - name: valve
    kind: do
    description: Valve opening.
    binding: {bus: mb, unit: 1, table: holding, address: 2, data_type: uint16}
    data_type: int
    unit: "%"
    range: {min: 0, max: 100}
    semantic_tags: [valve]
    side_effects: [flow changes]
    safe_value: 0
`

// wedgeBus wedges every write to holding register 2 in its driver, the
// transaction ignoring its context (a hung adapter), until released.
type wedgeBus struct {
	drivers.ModbusBus
	held    chan struct{} // a write to register 2 is wedged
	release chan struct{}
	mu      sync.Mutex
	writes  []uint16 // addresses written, in order
}

func (w *wedgeBus) WriteRegisters(ctx context.Context, unit uint8, addr uint16, v []uint16) error {
	if addr == 2 {
		select {
		case w.held <- struct{}{}:
		case <-w.release: // released for good
		}
		<-w.release
	}
	w.mu.Lock()
	w.writes = append(w.writes, addr)
	w.mu.Unlock()
	return w.ModbusBus.WriteRegisters(ctx, unit, addr, v)
}

func (w *wedgeBus) wrote(addr uint16) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, a := range w.writes {
		if a == addr {
			n++
		}
	}
	return n
}

// syncBuffer is a log written by many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The way out (guardSafeState's stop: SIGTERM, SIGINT or stdio closing)
// ends within its bounds whatever is wedged in a driver, and the other
// actuators are made safe:
//   - a do_* wedged holding the valve's write turn, the dead man's safe
//     state waiting behind it: the dead man gives up when stopped, and the
//     shutdown's safe state gives up on the valve at its 10 s deadline;
//   - the dead man's own safe write wedged: stop waits for the dead man 10 s,
//     then the shutdown's safe state gives up on the valve at its deadline;
//   - the shutdown's own safe write wedged: stop returns 10 s past the safe
//     state's deadline (engine.WedgeMargin), as the process would exit.
//
// Before, stop waited for the wedged write for good in every case: SIGTERM
// never ended the daemon.
func TestShutdownEndsWithAWedgedWrite(t *testing.T) {
	for _, c := range []struct {
		name  string
		wedge func(e *engine.Engine, w *wedgeBus)
		want  time.Duration // how long stop takes
		logs  []string
	}{
		{
			name: "a do_* holds the turn",
			wedge: func(e *engine.Engine, w *wedgeBus) {
				go e.Do(context.Background(), engine.Caller{Identity: "agent", Role: manifest.RoleOperator}, "do_valve", promcp.DoRequest{Value: 60, IdempotencyKey: "A"})
				<-w.held
				time.Sleep(2 * time.Second) // the dead man fires, and waits for the turn
			},
			want: shutdownSafeStateTimeout,
			logs: []string{"safe state at shutdown incomplete", "do_valve: safe value 0 not written: the register's write turn is held by another write"},
		},
		{
			name: "the dead man's write",
			wedge: func(e *engine.Engine, w *wedgeBus) {
				<-w.held // the dead man fired
			},
			want: 2 * shutdownSafeStateTimeout,
			logs: []string{"the dead man's safe state has not returned", "do_valve: safe value 0 not written"},
		},
		{
			name: "the shutdown's write",
			wedge: func(e *engine.Engine, w *wedgeBus) {
				go func() { <-w.held }() // the shutdown's
			},
			want: shutdownSafeStateTimeout + engine.WedgeMargin,
			logs: []string{"the safe state at shutdown has not returned"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m, diags := manifest.Parse("wedge.yml", []byte(wedgeManifest))
				if m == nil || diags.HasErrors() {
					t.Fatalf("manifest: %s", diags)
				}
				buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{}), true)
				if err != nil {
					t.Fatal(err)
				}
				w := &wedgeBus{ModbusBus: buses["mb"].(drivers.ModbusBus), held: make(chan struct{}), release: make(chan struct{})}
				var logs syncBuffer
				logger := slog.New(slog.NewTextHandler(&logs, nil))
				e, err := engine.New(m, nil, map[string]drivers.Bus{"mb": w}, engine.Options{Logger: logger})
				if err != nil {
					t.Fatal(err)
				}
				released := false
				unwedge := func() {
					if !released {
						released = true
						close(w.release)
					}
				}
				defer func() { unwedge(); synctest.Wait(); _ = e.Close() }()
				stopWatch := make(chan struct{})
				go func() { // the start-up safe state writes the valve too
					<-w.held
					w.release <- struct{}{}
					close(stopWatch)
				}()
				stop := guardSafeState(context.Background(), e, logger)
				<-stopWatch
				c.wedge(e, w)
				heater := w.wrote(4)

				began := time.Now()
				stopped := make(chan struct{})
				go func() { stop(); close(stopped) }()
				select {
				case <-stopped:
				case <-time.After(10 * time.Minute):
					unwedge()
					t.Fatalf("stop had not returned after 10 minutes; log:\n%s", logs.String())
				}
				if took := time.Since(began); took != c.want {
					t.Errorf("stop took %v, want %v", took, c.want)
				}
				if w.wrote(4) == heater {
					t.Error("the shutdown's safe state did not write the heater")
				}
				for _, s := range c.logs {
					if !strings.Contains(logs.String(), s) {
						t.Errorf("the log does not say %q:\n%s", s, logs.String())
					}
				}
			})
		})
	}
}
