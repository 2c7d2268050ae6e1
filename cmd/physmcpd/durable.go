//go:build !lite

package main

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/physmcp/physmcpd/audit"
	"github.com/physmcp/physmcpd/audit/sink"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/profiles"
	"github.com/physmcp/physmcpd/state"
)

// defaultStateDir is where the Full profile keeps its state on real hardware.
const defaultStateDir = "/var/lib/physmcpd"

// auditDir is the audit trail's directory inside a state directory.
func auditDir(stateDir string) string { return filepath.Join(stateDir, "audit") }

// durable is what serve keeps on disk: the state store and the audit trail.
type durable struct {
	store   *state.Store
	trail   *audit.Log
	shipper *audit.Shipper // nil without audit.remote_sink
}

// stateDirFor resolves --state-dir: the flag when given; otherwise the
// default on real hardware, and none (state in memory) when simulating, so a
// simulated device never shares keys or cooldowns with the real one.
func stateDirFor(cfg serveConfig) string {
	if cfg.stateDir != "" || cfg.simulate {
		return cfg.stateDir
	}
	return defaultStateDir
}

// openDurable opens the store (and the audit trail when the manifest enables
// it) for profiles that write to disk, and returns the engine options that use
// them. The lite profile writes nothing: asking it for a state directory is
// an error rather than a silently ignored flag.
func openDurable(cfg serveConfig, prof profiles.Profile, m *manifest.Manifest, logger *slog.Logger) (*durable, engine.Options, error) {
	d := &durable{}
	dir := stateDirFor(cfg)
	if !prof.DiskWrites {
		if cfg.stateDir != "" {
			return nil, engine.Options{}, fmt.Errorf("--state-dir %s: the %s profile writes nothing to disk; drop the flag or use --profile full", cfg.stateDir, prof.Name)
		}
		return d, engine.Options{}, nil
	}
	if dir == "" {
		logger.Warn("simulating without --state-dir: idempotency keys, cooldowns and rate windows are kept in memory only")
		if m.Audit != nil && m.Audit.Enabled {
			logger.Warn("audit.enabled needs a --state-dir; with none (simulation) no audit trail is written")
		}
		return d, engine.Options{}, nil
	}
	store, err := state.Open(dir, nil, logger)
	if err != nil {
		return nil, engine.Options{}, err
	}
	d.store = store
	opts := engine.Options{Idempotency: store, Limits: store, Operations: store}
	if m.Audit != nil && m.Audit.Enabled {
		trail, err := openTrail(cfg, dir, m.Audit.RetentionDays, logger)
		if err != nil {
			store.Close()
			return nil, engine.Options{}, err
		}
		d.trail = trail
		opts.Audit = auditSink(trail, logger)
		if rs := m.Audit.RemoteSink; rs != nil {
			if d.shipper, err = shipTrail(trail, rs, logger); err != nil {
				d.close(logger)
				return nil, engine.Options{}, err
			}
		}
	}
	logger.Info("state directory", "dir", dir, "audit", d.trail != nil)
	return d, opts, nil
}

// shipTrail ships the trail to audit.remote_sink from the position it
// reached last time; lines wait in the trail while the sink is down.
func shipTrail(trail *audit.Log, rs *manifest.RemoteSink, logger *slog.Logger) (*audit.Shipper, error) {
	sender, name, err := sink.New(rs)
	if err != nil {
		return nil, err
	}
	sh, err := audit.Ship(trail, sender, audit.ShipOptions{Sink: name, Logger: logger})
	if err != nil {
		sender.Close()
		return nil, err
	}
	logger.Info("audit remote sink", "sink", name)
	return sh, nil
}

func (d *durable) close(logger *slog.Logger) {
	if d.shipper != nil {
		if err := d.shipper.Close(); err != nil {
			logger.Warn("closing the audit sink", "err", err)
		}
	}
	if d.trail != nil {
		if err := d.trail.Close(); err != nil {
			logger.Warn("closing the audit trail", "err", err)
		}
	}
	if d.store != nil {
		if err := d.store.Close(); err != nil {
			logger.Warn("closing the state store", "err", err)
		}
	}
}
