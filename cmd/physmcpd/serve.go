package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/strictyaml"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/profiles"
)

func init() {
	register("serve", "serve the device's tools over MCP ("+serveTransports+")", runServe)
}

// serveConfig is the serve command line.
type serveConfig struct {
	manifest, policy string
	simulate         bool
	stdio            bool
	httpAddr         string
	allowRemote      bool
	logLevel         slog.Level
	profile          string // full, lite, proxy or aggregator; empty: the manifest's, else full
	serialPort       string
	baud             int
	group            string // the manifest group to serve; HTTP without it serves every group
	access           accessFlags
	stateDir         string // empty: the default on hardware, none when simulating (stateDirFor)
	strictStart      bool   // every bus and GPIO line must open at start-up, else exit 1
	auditKey         string // empty: audit.key in the state directory
	trustClock       bool   // readings are not degraded while the kernel reports the clock unsynchronised
}

func runServe(args []string, stdout, stderr io.Writer) int {
	cfg, code := parseServe(args, stderr)
	if code >= 0 {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return serve(ctx, cfg, os.Stdin, stdout, stderr)
}

// parseServe returns the configuration, or an exit code >= 0 when the command should stop.
func parseServe(args []string, stderr io.Writer) (serveConfig, int) {
	var cfg serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: physmcpd serve --manifest FILE [--policy FILE] [--simulate] "+serveUsage+" [--strict-start] [--trust-clock] [--log-level LEVEL]")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.manifest, "manifest", "", "device manifest (physmcp.manifest.yml), required")
	fs.StringVar(&cfg.policy, "policy", "", "policy (physmcp.policy.yml); without one every caller has role none")
	fs.BoolVar(&cfg.simulate, "simulate", false, "serve every bus from its simulator instead of the hardware")
	fs.BoolVar(&cfg.stdio, "stdio", false, "serve MCP on stdin/stdout (the default)")
	addBuildFlags(fs, &cfg)
	fs.StringVar(&cfg.profile, "profile", "", "full, lite, proxy or aggregator (default: the manifest's profile, else "+profiles.All()[0].Name+"); lite serves read_* and can_do only; proxy and aggregator adopt other devices' tools (docs/profiles.md)")
	fs.StringVar(&cfg.serialPort, "serial", "", "serve newline-delimited JSON-RPC on the serial line PORT (e.g. /dev/ttyS0), 8N1")
	fs.IntVar(&cfg.baud, "baud", 115200, "baud rate for --serial")
	fs.StringVar(&cfg.group, "group", "", "serve only this manifest group's endpoint (stdio and --serial serve one endpoint: the ungrouped capabilities unless given)")
	fs.BoolVar(&cfg.strictStart, "strict-start", false, "exit 1 when a bus or GPIO line cannot be opened at start-up (by default its capabilities are unavailable and it is reopened in the background)")
	fs.BoolVar(&cfg.trustClock, "trust-clock", false, "the system clock is right without NTP (a battery-backed real-time clock keeps it): do not degrade readings while the kernel reports it unsynchronised")
	level := fs.String("log-level", "info", "debug, info, warn or error (logs go to stderr)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, 0
		}
		return cfg, 2
	}
	usageError := func(format string, a ...any) (serveConfig, int) {
		fmt.Fprintf(stderr, "physmcpd serve: "+format+"\n", a...)
		return cfg, 2
	}
	if fs.NArg() > 0 {
		return usageError("unexpected argument %q", fs.Arg(0))
	}
	if cfg.manifest == "" {
		return usageError("--manifest is required")
	}
	if n := countTrue(cfg.stdio, cfg.httpAddr != "", cfg.serialPort != ""); n > 1 {
		return usageError("give one of --stdio, --serial or --http")
	}
	if cfg.profile != "" {
		if _, err := profiles.Lookup(cfg.profile); err != nil {
			return usageError("--profile: %v", err)
		}
	}
	if cfg.baud <= 0 {
		return usageError("--baud %d: must be positive", cfg.baud)
	}
	if err := cfg.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return usageError("--log-level %q: want debug, info, warn or error", *level)
	}
	if err := checkBuildFlags(cfg); err != nil {
		return usageError("%v", err)
	}
	return cfg, -1
}

// serve runs until ctx is cancelled (SIGINT/SIGTERM) or, on stdio, until the client closes stdin.
func serve(ctx context.Context, cfg serveConfig, stdin io.Reader, stdout, stderr io.Writer) int {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	slog.SetDefault(logger)

	m, p, ok := loadDevice(cfg.manifest, cfg.policy, stderr)
	if !ok || !serveFilesReadable(m, p, cfg.access, stderr) {
		return 1
	}
	prof, m, err := applyProfile(cfg, m, logger)
	if err != nil {
		logger.Error("cannot serve", "err", err)
		return 1
	}
	if err := checkMesh(cfg, m); err != nil {
		logger.Error("cannot serve", "err", err)
		return 1
	}
	if diags := checkProtocols(cfg, prof, m); len(diags) > 0 {
		printDiags(stderr, diags)
		if diags.HasErrors() {
			return 1
		}
	}
	if p == nil {
		logger.Warn("no --policy given: every caller has role none, so tools that need a role are refused")
	}
	dur, opts, err := openDurable(cfg, prof, m, logger)
	if err != nil {
		logger.Error("cannot open the state directory", "err", err)
		return 1
	}
	defer dur.close(logger)
	opts.ClockSynced = clockProbe(ctx, cfg, logger)
	node, err := meshFor(m, &opts, dur, logger)
	if err != nil {
		logger.Error("cannot join the mesh", "err", err)
		return 1
	}
	e, err := startEngine(ctx, m, p, busOptions{simulate: cfg.simulate, strict: cfg.strictStart, adopt: true}, logger, opts)
	if err != nil {
		logger.Error("cannot start", "err", err)
		return 1
	}
	defer func() {
		if err := e.Close(); err != nil {
			logger.Warn("closing the buses", "err", err)
		}
	}()
	defer guardSafeState(ctx, e, logger)()
	stopTelemetry, err := startTelemetry(e, logger)
	if err != nil {
		logger.Error("cannot publish telemetry", "err", err)
		return 1
	}
	defer stopTelemetry()
	dur.recoverAudit(logger) // after the start-up safe state has settled in-doubt keys

	local := engine.Caller{Identity: "local", Role: p.LocalRole()}
	if cfg.transport() == profiles.Serial {
		// whoever is on the wire is not someone who could start the process
		local = engine.Caller{Identity: "serial", Role: p.SerialRole()}
	}
	logger.Info("serving", "device", m.Device.ID, "profile", prof.Name, "tools", len(e.Tools()), "simulate", cfg.simulate, "caller_role", local.Role)
	return serveMCP(ctx, cfg, prof, e, dur, node, local, stdin, stdout, logger)
}

// loadDevice reads the manifest and, when given, the policy, printing every
// finding to stderr. ok is false when either has errors.
func loadDevice(manifestPath, policyPath string, stderr io.Writer) (*manifest.Manifest, *policy.Policy, bool) {
	m, diags := manifest.Load(manifestPath)
	printDiags(stderr, diags)
	if m == nil || diags.HasErrors() {
		return nil, nil, false
	}
	if policyPath == "" {
		return m, nil, true
	}
	p, diags := policy.Load(policyPath, m)
	printDiags(stderr, diags)
	if p == nil || diags.HasErrors() {
		return nil, nil, false
	}
	return m, p, true
}

func printDiags(w io.Writer, diags strictyaml.Diags) {
	for _, d := range diags {
		fmt.Fprintln(w, d)
	}
}

func countTrue(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
