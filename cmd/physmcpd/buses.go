package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync/atomic"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/gpio"
	"github.com/physmcp/physmcpd/drivers/i2c"
	"github.com/physmcp/physmcpd/drivers/modbus"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
)

// realOpeners are the bus drivers compiled into this binary, by bus type.
// A bus type missing here can only be served simulated.
func realOpeners() drivers.Openers {
	o := drivers.Openers{
		manifest.BusI2C:       i2c.Open,
		manifest.BusGPIO:      gpio.Open,
		manifest.BusModbusTCP: modbus.OpenTCP,
		manifest.BusModbusRTU: modbus.OpenRTU,
	}
	maps.Copy(o, buildOpeners)
	return o
}

// buildOpeners are the drivers only one build has (adopt.go: mcp buses in
// the Full build).
var buildOpeners = drivers.Openers{}

// expandAdopted adds the capabilities that mcp buses adopt wholesale, once
// their buses are open (nil in a build without mcp buses).
var expandAdopted func(context.Context, *manifest.Manifest, map[string]drivers.Bus, *slog.Logger) error

// openEngine opens every bus of m (all simulated when simulate is set) and
// binds the engine to them with opts (its Logger is set to logger). Every
// bus must open. On failure nothing stays open.
func openEngine(ctx context.Context, m *manifest.Manifest, p *policy.Policy, simulate bool, logger *slog.Logger, opts engine.Options) (*engine.Engine, error) {
	return startEngine(ctx, m, p, busOptions{simulate: simulate, strict: true}, logger, opts)
}

// busOptions is how serve opens the buses.
type busOptions struct {
	simulate bool
	// strict: every bus and GPIO line must open at start-up (serve
	// --strict-start); otherwise one that cannot is served unavailable and
	// opened in the background (drivers.OpenAllWith).
	strict bool
	// adopt: add the capabilities that mcp buses adopt wholesale, waiting
	// for their sources (serve). Without it only the manifest's own
	// capabilities are bound (tools, which must not wait for a network).
	adopt bool
}

// startEngine is openEngine with bus options. A bus that opens after
// start-up gets its safe state written before anything else reaches it.
func startEngine(ctx context.Context, m *manifest.Manifest, p *policy.Policy, bo busOptions, logger *slog.Logger, opts engine.Options) (*engine.Engine, error) {
	var started atomic.Pointer[engine.Engine]
	buses, err := drivers.OpenAllWith(ctx, m, realOpeners(), sim.Open, bo.simulate, drivers.OpenOptions{
		Strict: bo.strict,
		Logger: logger,
		OnOpen: func(ctx context.Context, bus string) {
			// A bus that opens before the engine exists gets the start-up
			// safe state with the others (guardSafeState).
			if e := started.Load(); e != nil {
				if err := e.ApplySafeStateOn(ctx, bus, "bus "+bus+" opened"); err != nil {
					logger.Error("safe state incomplete on a bus that opened late", "bus", bus, "err", err)
				}
			}
		},
	})
	if err != nil {
		return nil, err
	}
	if bo.adopt && m.Adopts() && expandAdopted != nil {
		if err := expandAdopted(ctx, m, buses, logger); err != nil {
			for _, b := range buses {
				b.Close()
			}
			return nil, err
		}
	}
	opts.Logger = logger
	e, err := engine.New(m, p, buses, opts)
	if err != nil {
		for _, b := range buses {
			b.Close()
		}
		return nil, fmt.Errorf("bind capabilities: %w", err)
	}
	started.Store(e)
	return e, nil
}
