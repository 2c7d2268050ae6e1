package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/strictyaml"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/profiles"
)

func init() {
	register("serve", "serve the device's tools over MCP (stdio, a serial line or streamable HTTP)", runServe)
}

// serveConfig is the serve command line.
type serveConfig struct {
	manifest, policy string
	simulate         bool
	stdio            bool
	httpAddr         string
	allowRemote      bool
	logLevel         slog.Level
	profile          string // full or lite; empty: the manifest's, else full
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
		fmt.Fprintln(stderr, "usage: physmcpd serve --manifest FILE [--policy FILE] [--simulate] [--profile full|lite] [--stdio | --serial PORT [--baud N] | --http ADDR [--allow-remote]] [--strict-start] [--trust-clock] [--log-level LEVEL]")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.manifest, "manifest", "", "device manifest (physmcp.manifest.yml), required")
	fs.StringVar(&cfg.policy, "policy", "", "policy (physmcp.policy.yml); without one every caller has role none")
	fs.BoolVar(&cfg.simulate, "simulate", false, "serve every bus from its simulator instead of the hardware")
	fs.BoolVar(&cfg.stdio, "stdio", false, "serve MCP on stdin/stdout (the default)")
	fs.StringVar(&cfg.httpAddr, "http", "", "serve streamable HTTP at ADDR (e.g. 127.0.0.1:8765), endpoint "+mcpserver.EndpointPath)
	fs.BoolVar(&cfg.allowRemote, "allow-remote", false, "allow --http on a non-loopback address (needs identity providers in the policy: callers must authenticate)")
	cfg.access.register(fs)
	fs.StringVar(&cfg.profile, "profile", "", "full or lite (default: the manifest's profile, else full); lite serves read_* and can_do only")
	fs.StringVar(&cfg.serialPort, "serial", "", "serve newline-delimited JSON-RPC on the serial line PORT (e.g. /dev/ttyS0), 8N1")
	fs.IntVar(&cfg.baud, "baud", 115200, "baud rate for --serial")
	fs.StringVar(&cfg.group, "group", "", "serve only this manifest group's endpoint (stdio and --serial serve one endpoint: the ungrouped capabilities unless given)")
	fs.StringVar(&cfg.stateDir, "state-dir", "", "directory for idempotency keys, cooldowns, rate windows and the audit trail (full profile; default "+defaultStateDir+", none with --simulate)")
	fs.StringVar(&cfg.auditKey, "audit-key", "", "key file of the audit trail's HMAC chain, created on first use (default "+auditKeyFile+" in the state directory)")
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
	if cfg.httpAddr != "" {
		if err := checkListenAddr(cfg.httpAddr, cfg.allowRemote); err != nil {
			return usageError("%v", err)
		}
	}
	if err := cfg.access.check(); err != nil {
		return usageError("%v", err)
	}
	return cfg, -1
}

// checkListenAddr refuses addresses other hosts can reach unless allowed;
// serve then also requires the policy to authenticate HTTP callers.
func checkListenAddr(addr string, allowRemote bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http %q: want HOST:PORT, e.g. 127.0.0.1:8765: %v", addr, err)
	}
	if port == "" {
		return fmt.Errorf("--http %q: the port is missing", addr)
	}
	if allowRemote || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("--http %q is not a loopback address: listen on 127.0.0.1 or [::1], or pass --allow-remote "+
		"(which needs identity providers in the policy, so that every caller authenticates; see docs/security.md)", addr)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serve runs until ctx is cancelled (SIGINT/SIGTERM) or, on stdio, until the client closes stdin.
func serve(ctx context.Context, cfg serveConfig, stdin io.Reader, stdout, stderr io.Writer) int {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	slog.SetDefault(logger)

	m, p, ok := loadDevice(cfg.manifest, cfg.policy, stderr)
	if !ok || !serveFilesReadable(p, cfg.access, stderr) {
		return 1
	}
	prof, m, err := applyProfile(cfg, m, logger)
	if err != nil {
		logger.Error("cannot serve", "err", err)
		return 1
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
	e, err := startEngine(ctx, m, p, busOptions{simulate: cfg.simulate, strict: cfg.strictStart}, logger, opts)
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
	dur.recoverAudit(logger) // after the start-up safe state has settled in-doubt keys

	local := engine.Caller{Identity: "local", Role: p.LocalRole()}
	if cfg.transport() == profiles.Serial {
		// whoever is on the wire is not someone who could start the process
		local = engine.Caller{Identity: "serial", Role: p.SerialRole()}
	}
	eps, err := endpoints(e, mcpserver.Options{
		Version: buildVersion,
		Logger:  logger,
		// HTTP callers are who the access middleware authenticated.
		Caller: mcpserver.CallerFrom(local),
	}, cfg)
	if err != nil {
		logger.Error("cannot build the MCP server", "err", err)
		return 1
	}
	s := eps[0].Server
	logger.Info("serving", "device", m.Device.ID, "profile", prof.Name, "tools", len(e.Tools()), "simulate", cfg.simulate, "caller_role", local.Role)

	switch cfg.transport() {
	case profiles.Serial:
		stopping := func() {}
		defer func() { stopping() }()
		port := mcpserver.SerialPort{Path: cfg.serialPort, Baud: cfg.baud, Opened: func() { stopping = notifyReady(ctx, e.Health, logger) }}
		if err := mcpserver.ServeSerial(ctx, s, port, streamLimits(prof), logger); err != nil {
			logger.Error("serial transport failed", "err", err)
			return 1
		}
	case profiles.Stdio:
		stopping := notifyReady(ctx, e.Health, logger)
		defer stopping()
		if err := mcpserver.ServeStream(ctx, s, stdin, stdout, streamLimits(prof)); err != nil {
			logger.Error("stdio transport failed", "err", err)
			return 1
		}
	default:
		acc, err := httpAccess(cfg, m, p, e, dur.trail, logger)
		if err != nil {
			logger.Error("cannot serve HTTP", "err", err)
			return 1
		}
		return serveHTTP(ctx, cfg, mcpserver.NewEndpointsHandler(eps, logger, cfg.access.sessionLimits()), acc, e.Health, logger)
	}
	logger.Info("stopped")
	return 0
}

func serveHTTP(ctx context.Context, cfg serveConfig, h *mcpserver.HTTPHandler, acc mcpserver.Access, health func(context.Context) error, logger *slog.Logger) int {
	ln, err := net.Listen("tcp", cfg.httpAddr)
	if err != nil {
		logger.Error("cannot listen", "addr", cfg.httpAddr, "err", err)
		return 1
	}
	srv := mcpserver.NewHTTPServer(mcpserver.Protect(h, acc))
	done := make(chan error, 1)
	scheme := "http"
	if cfg.access.tls() {
		scheme = "https"
		go func() { done <- srv.ServeTLS(ln, cfg.access.tlsCert, cfg.access.tlsKey) }()
	} else {
		go func() { done <- srv.Serve(ln) }()
	}
	logger.Info("listening", "url", scheme+"://"+ln.Addr().String()+mcpserver.EndpointPath,
		"max_sessions", cfg.access.maxSessions, "session_idle_timeout", cfg.access.sessionIdle, "body_timeout", cfg.access.bodyTimeout)
	stopping := notifyReady(ctx, health, logger)
	defer stopping()

	select {
	case err := <-done:
		logger.Error("HTTP server failed", "err", err)
		return 1
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Open GET streams never end by themselves; close the sessions first.
	h.CloseSessions(shutdownCtx)
	if err := srv.Shutdown(shutdownCtx); err != nil {
		logger.Warn("HTTP shutdown was not clean", "err", err)
	}
	logger.Info("stopped")
	return 0
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
