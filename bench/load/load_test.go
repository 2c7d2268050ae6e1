package main

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// TestLoad runs a short load: 1000 concurrent streamable-HTTP clients (200
// under the race detector), a few calls each. PHYSMCPD_LOAD_CALLS and
// PHYSMCPD_LOAD_CLIENTS make it longer; bench/load.sh runs the full size.
func TestLoad(t *testing.T) {
	cfg := Config{
		Manifest: "../../examples/physmcp.manifest.yml",
		Policy:   "../../examples/physmcp.policy.yml",
		Clients:  1000,
		Calls:    3,
		Timeout:  60 * time.Second,
		Seed:     1,
	}
	if raceBuild {
		cfg.Clients = 200
	}
	if testing.Short() {
		cfg.Clients, cfg.Calls = 50, 2
	}
	cfg.Clients = envInt(t, "PHYSMCPD_LOAD_CLIENTS", cfg.Clients)
	cfg.Calls = envInt(t, "PHYSMCPD_LOAD_CALLS", cfg.Calls)
	rep, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.String())
	if why := rep.Failed(); why != "" {
		t.Fatal(why)
	}
	if rep.Calls != cfg.Clients*cfg.Calls {
		t.Fatalf("%d calls completed, want %d", rep.Calls, cfg.Clients*cfg.Calls)
	}
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}
