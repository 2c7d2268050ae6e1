package main

import (
	"context"
	"fmt"
	"log/slog"

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
	return drivers.Openers{
		manifest.BusI2C:       i2c.Open,
		manifest.BusGPIO:      gpio.Open,
		manifest.BusModbusTCP: modbus.OpenTCP,
		manifest.BusModbusRTU: modbus.OpenRTU,
	}
}

// openEngine opens every bus of m (all simulated when simulate is set) and
// binds the engine to them with opts (its Logger is set to logger). On
// failure nothing stays open.
func openEngine(ctx context.Context, m *manifest.Manifest, p *policy.Policy, simulate bool, logger *slog.Logger, opts engine.Options) (*engine.Engine, error) {
	buses, err := drivers.OpenAll(ctx, m, realOpeners(), sim.Open, simulate)
	if err != nil {
		return nil, err
	}
	opts.Logger = logger
	e, err := engine.New(m, p, buses, opts)
	if err != nil {
		for _, b := range buses {
			b.Close()
		}
		return nil, fmt.Errorf("bind capabilities: %w", err)
	}
	return e, nil
}
