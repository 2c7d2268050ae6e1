package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/physmcp/physmcpd/audit"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/profiles"
	"github.com/physmcp/physmcpd/state"
)

// defaultStateDir is where the Full profile keeps its state on real hardware.
const defaultStateDir = "/var/lib/physmcpd"

// shutdownSafeStateTimeout bounds the safe-state writes on the way out.
const shutdownSafeStateTimeout = 10 * time.Second

// auditDir is the audit trail's directory inside a state directory.
func auditDir(stateDir string) string { return filepath.Join(stateDir, "audit") }

// durable is what serve keeps on disk: the state store and the audit trail.
type durable struct {
	store *state.Store
	trail *audit.Log
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
	opts := engine.Options{Idempotency: store, Limits: store}
	if m.Audit != nil && m.Audit.Enabled {
		trail, err := openTrail(cfg, dir, m.Audit.RetentionDays, logger)
		if err != nil {
			store.Close()
			return nil, engine.Options{}, err
		}
		d.trail = trail
		opts.Audit = auditSink(trail, logger)
	}
	logger.Info("state directory", "dir", dir, "audit", d.trail != nil)
	return d, opts, nil
}

func (d *durable) close(logger *slog.Logger) {
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

// guardSafeState drives the actuators to their safe values now (before
// serving), watches the dead man when the manifest sets one, and returns the
// function serve defers: it stops the watch and applies the safe state again
// on the way out (SIGTERM, SIGINT or the client closing stdio).
func guardSafeState(ctx context.Context, e *engine.Engine, logger *slog.Logger) (stop func()) {
	if err := e.ApplySafeState(ctx, "start-up"); err != nil {
		logger.Error("safe state at start-up incomplete", "err", err)
	}
	watch, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		timeout := e.DeadManTimeout()
		if timeout <= 0 {
			return
		}
		t := time.NewTicker(min(max(timeout/10, 10*time.Millisecond), time.Second))
		defer t.Stop()
		for {
			select {
			case <-watch.Done():
				return
			case <-t.C:
				if _, err := e.CheckDeadMan(watch); err != nil {
					logger.Error("dead-man safe state incomplete", "err", err)
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
		sctx, cancel := context.WithTimeout(context.Background(), shutdownSafeStateTimeout)
		defer cancel()
		if err := e.ApplySafeState(sctx, "shutdown"); err != nil {
			logger.Error("safe state at shutdown incomplete", "err", err)
		}
	}
}
