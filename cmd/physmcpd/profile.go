package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/profiles"
)

// transport is the way serve was asked to serve MCP.
func (cfg serveConfig) transport() profiles.Transport {
	switch {
	case cfg.httpAddr != "":
		return profiles.HTTP
	case cfg.serialPort != "":
		return profiles.Serial
	}
	return profiles.Stdio
}

// applyProfile resolves the profile (--profile, else the manifest's, else
// full), refuses a transport it does not serve, applies its runtime limits and
// returns the manifest as the profile serves it.
func applyProfile(cfg serveConfig, m *manifest.Manifest, logger *slog.Logger) (profiles.Profile, *manifest.Manifest, error) {
	prof, err := profiles.Resolve(cfg.profile, m)
	if err != nil {
		return prof, nil, fmt.Errorf("--profile: %w", err)
	}
	if err := prof.CheckTransport(cfg.transport()); err != nil {
		if prof.Name == profiles.Lite.Name {
			return prof, nil, fmt.Errorf("%w; the lite profile has no HTTP server: use --stdio or --serial, or --profile full", err)
		}
		return prof, nil, fmt.Errorf("%w: serve it with --http ADDR", err)
	}
	served, hidden, err := prof.Apply(m)
	if err != nil {
		return prof, nil, err
	}
	if len(hidden) > 0 {
		logger.Info("profile serves no do_ tools; not exposed", "profile", prof.Name, "tools", hidden)
	}
	applyRuntime(prof)
	return prof, served, nil
}

// applyRuntime sets the Go runtime's collector and processors as the profile
// says; an operator's GOGC and GOMAXPROCS win over the profile's.
func applyRuntime(prof profiles.Profile) {
	if prof.GCPercent > 0 && os.Getenv("GOGC") == "" {
		debug.SetGCPercent(prof.GCPercent)
	}
	if prof.MaxProcs > 0 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(prof.MaxProcs)
	}
}
