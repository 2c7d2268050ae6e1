package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
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
)

func init() {
	register("serve", "serve the device's tools over MCP (stdio or streamable HTTP)", runServe)
}

// buildVersion is set at link time (-ldflags "-X main.buildVersion=...").
var buildVersion = "dev"

// serveConfig is the serve command line.
type serveConfig struct {
	manifest, policy string
	simulate         bool
	stdio            bool
	httpAddr         string
	allowRemote      bool
	logLevel         slog.Level
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
		fmt.Fprintln(stderr, "usage: physmcpd serve --manifest FILE [--policy FILE] [--simulate] [--stdio | --http ADDR [--allow-remote]] [--log-level LEVEL]")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.manifest, "manifest", "", "device manifest (physmcp.manifest.yml), required")
	fs.StringVar(&cfg.policy, "policy", "", "policy (physmcp.policy.yml); without one every caller has role none")
	fs.BoolVar(&cfg.simulate, "simulate", false, "serve every bus from its simulator instead of the hardware")
	fs.BoolVar(&cfg.stdio, "stdio", false, "serve MCP on stdin/stdout (the default)")
	fs.StringVar(&cfg.httpAddr, "http", "", "serve streamable HTTP at ADDR (e.g. 127.0.0.1:8765), endpoint "+mcpserver.EndpointPath)
	fs.BoolVar(&cfg.allowRemote, "allow-remote", false, "allow --http on a non-loopback address (HTTP callers are not authenticated yet)")
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
	if cfg.stdio && cfg.httpAddr != "" {
		return usageError("give --stdio or --http, not both")
	}
	if err := cfg.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return usageError("--log-level %q: want debug, info, warn or error", *level)
	}
	if cfg.httpAddr != "" {
		if err := checkListenAddr(cfg.httpAddr, cfg.allowRemote); err != nil {
			return usageError("%v", err)
		}
	}
	return cfg, -1
}

// checkListenAddr refuses addresses other hosts can reach unless allowed:
// until HTTP authentication lands every HTTP caller gets the local role.
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
	return fmt.Errorf("--http %q is not a loopback address: HTTP callers are not authenticated yet (authentication arrives in a later release) "+
		"and would act with the local role; listen on 127.0.0.1 or [::1], or pass --allow-remote to accept that risk", addr)
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
	if !ok {
		return 1
	}
	if p == nil {
		logger.Warn("no --policy given: every caller has role none, so tools that need a role are refused")
	}
	e, err := openEngine(ctx, m, p, cfg.simulate, logger)
	if err != nil {
		logger.Error("cannot start", "err", err)
		return 1
	}
	defer func() {
		if err := e.Close(); err != nil {
			logger.Warn("closing the buses", "err", err)
		}
	}()

	local := engine.Caller{Identity: "local", Role: p.LocalRole()}
	s, err := mcpserver.New(e, mcpserver.Options{
		Version: buildVersion,
		Logger:  logger,
		// HTTP callers get the local role too until authentication lands
		// (which is why --http refuses non-loopback addresses by default).
		Caller: func(context.Context) engine.Caller { return local },
	})
	if err != nil {
		logger.Error("cannot build the MCP server", "err", err)
		return 1
	}
	logger.Info("serving", "device", m.Device.ID, "tools", len(e.Tools()), "simulate", cfg.simulate, "local_role", local.Role)

	if cfg.httpAddr == "" {
		if err := mcpserver.ServeStdio(ctx, s, stdin, stdout); err != nil {
			logger.Error("stdio transport failed", "err", err)
			return 1
		}
		logger.Info("stopped")
		return 0
	}
	return serveHTTP(ctx, cfg.httpAddr, mcpserver.NewHTTPHandler(s, logger), logger)
}

func serveHTTP(ctx context.Context, addr string, h *mcpserver.HTTPHandler, logger *slog.Logger) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		logger.Error("cannot listen", "addr", addr, "err", err)
		return 1
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	logger.Info("listening", "url", "http://"+ln.Addr().String()+mcpserver.EndpointPath)

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
