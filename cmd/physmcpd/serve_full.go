//go:build !lite

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
	"strings"
	"time"

	"github.com/physmcp/physmcpd/audit"
	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/metrics"
	"github.com/physmcp/physmcpd/profiles"
)

// serveTransports and serveUsage are what serve's summary and usage line say
// of the transports.
const serveTransports = "stdio, a serial line or streamable HTTP"

const serveUsage = "[--profile full|lite|proxy|aggregator] [--stdio | --serial PORT [--baud N] | --http ADDR [--allow-remote]] [--state-dir DIR]"

// addBuildFlags are serve's flags for what only the Full build has: HTTP,
// its access rules, and the state directory.
func addBuildFlags(fs *flag.FlagSet, cfg *serveConfig) {
	fs.StringVar(&cfg.httpAddr, "http", "", "serve streamable HTTP at ADDR (e.g. 127.0.0.1:8765), endpoint "+mcpserver.EndpointPath)
	fs.BoolVar(&cfg.allowRemote, "allow-remote", false, "allow --http on a non-loopback address (needs identity providers in the policy: callers must authenticate)")
	cfg.access.register(fs)
	fs.StringVar(&cfg.stateDir, "state-dir", "", "directory for idempotency keys, cooldowns, rate windows and the audit trail (full profile; default "+defaultStateDir+", none with --simulate)")
	fs.StringVar(&cfg.auditKey, "audit-key", "", "key file of the audit trail's HMAC chain, created on first use (default "+auditKeyFile+" in the state directory)")
}

// checkBuildFlags validates the flags addBuildFlags registers.
func checkBuildFlags(cfg serveConfig) error {
	if cfg.httpAddr != "" {
		if err := checkListenAddr(cfg.httpAddr, cfg.allowRemote); err != nil {
			return err
		}
	} else if cfg.access.metricsPublic {
		return errors.New("--metrics-public serves " + metrics.Path + " over HTTP: it needs --http")
	}
	return cfg.access.check()
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

// serveMCP serves e through mcp-go: over HTTP one endpoint per group, on
// stdio or a serial line the one --group names.
func serveMCP(ctx context.Context, cfg serveConfig, prof profiles.Profile, e *engine.Engine, dur *durable, node *meshNode, local engine.Caller, stdin io.Reader, stdout io.Writer, logger *slog.Logger) int {
	router := node.router()
	// One issuer for every endpoint, so the status page lists every
	// approval waiting for an answer.
	approvals := auth.NewApprovals(nil)
	opts := mcpserver.Options{
		Version: buildVersion,
		Logger:  logger,
		// HTTP callers are who the access middleware authenticated.
		Caller:    mcpserver.CallerFrom(local),
		Approvals: approvals,
		Profile:   prof.Name,
	}
	if router != nil {
		opts.Router = router
	}
	if err := checkMeshSource(prof, e.Manifest()); err != nil {
		logger.Error("cannot serve", "err", err)
		return 1
	}
	opts.ToolsChange = followsTools(e)
	eps, err := endpoints(e, opts, cfg, prof)
	if err != nil {
		logger.Error("cannot build the MCP server", "err", err)
		return 1
	}
	if cfg.transport() == profiles.HTTP {
		acc, err := httpAccess(cfg, e.Manifest(), e.Policy(), e, dur.trail, logger)
		if err != nil {
			logger.Error("cannot serve HTTP", "err", err)
			return 1
		}
		h := mcpserver.NewEndpointsHandler(eps, logger, cfg.access.sessionLimits())
		if opts.ToolsChange {
			mountNewGroups(e, opts, eps, h)
		}
		src := metrics.Sources{Engine: e, Trail: dur.trail, Shipper: dur.shipper, Sessions: h.OpenSessions, Version: buildVersion, Revision: buildRevision}
		return serveHTTP(ctx, cfg, prof, e, node, h, statusAPI(e, dur.trail, approvals, local, logger, h), src, acc, logger)
	}
	s, lim := eps[0].Server, streamLimits(prof)
	return serveStream(ctx, cfg, e, func(ctx context.Context, in io.Reader, out io.Writer) error {
		return mcpserver.ServeStream(ctx, s, in, out, lim)
	}, stdin, stdout, logger)
}

func streamLimits(p profiles.Profile) mcpserver.StreamLimits {
	return mcpserver.StreamLimits{Workers: p.Workers, Queue: p.Queue, MaxMessageBytes: p.MaxMessageBytes}
}

// serveHTTP serves h, and api in front of it (the status page's data and
// PhysMCP's extension methods, authenticated as h is), and the metrics of
// src, until ctx ends. A mesh node joins the mesh once it listens (its
// metadata names the endpoint).
func serveHTTP(ctx context.Context, cfg serveConfig, prof profiles.Profile, e *engine.Engine, node *meshNode, h *mcpserver.HTTPHandler, api http.Handler, src metrics.Sources, acc mcpserver.Access, logger *slog.Logger) int {
	ln, err := net.Listen("tcp", cfg.httpAddr)
	if err != nil {
		logger.Error("cannot listen", "addr", cfg.httpAddr, "err", err)
		return 1
	}
	scheme := "http"
	if cfg.access.tls() {
		scheme = "https"
	}
	ms, err := node.join(e.Manifest(), prof.Name, e.Roles, ln.Addr(), scheme, logger)
	if err != nil {
		ln.Close()
		logger.Error("cannot join the mesh", "err", err)
		return 1
	}
	if ms != nil {
		defer ms.Close()
	}
	stopAdopting, err := adoptFromMesh(ctx, e, ms, node, logger)
	if err != nil {
		ln.Close()
		logger.Error("cannot adopt the devices of the mesh", "err", err)
		return 1
	}
	defer stopAdopting()
	api = mcpserver.WithMethods(api, meshMethods(describedManifest(e.Manifest(), prof, ln.Addr()), prof.Name, e.Roles, ms, node.router(), e.QuorumCheck))
	// /healthz and the status page's static files need no token; /metrics
	// takes the token of /mcp (any role) unless --metrics-public puts it in
	// front of the access rules.
	var handler http.Handler
	if cfg.access.metricsPublic {
		logger.Warn(metrics.Path + " is served without authentication (--metrics-public): whoever reaches the port sees the tool names and their counts")
		handler = metrics.Handler(src, logger, mcpserver.StatusPage(mcpserver.Protect(api, acc)))
	} else {
		handler = mcpserver.StatusPage(mcpserver.Protect(metrics.Handler(src, logger, api), acc))
	}
	srv := mcpserver.NewHTTPServer(mcpserver.Health(e.Health, logger, handler))
	done := make(chan error, 1)
	if cfg.access.tls() {
		srv.TLSConfig = mcpserver.TLSConfig(acc)
		go func() { done <- srv.ServeTLS(ln, cfg.access.tlsCert, cfg.access.tlsKey) }()
	} else {
		go func() { done <- srv.Serve(ln) }()
	}
	logger.Info("listening", "url", scheme+"://"+ln.Addr().String()+mcpserver.EndpointPath, "status_page", scheme+"://"+ln.Addr().String()+mcpserver.StatusPath,
		"max_sessions", cfg.access.maxSessions, "session_idle_timeout", cfg.access.sessionIdle, "body_timeout", cfg.access.bodyTimeout)
	stopping := notifyReady(ctx, e.Health, logger)
	defer stopping()
	releaseStartPages(logger)

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

// statusAPI serves the status page's data in front of next, to callers
// Protect authenticated (or the local caller), with the trail's tail when
// one is kept and the approvals waiting for an answer.
func statusAPI(e *engine.Engine, trail *audit.Log, approvals *auth.Approvals, local engine.Caller, logger *slog.Logger, next http.Handler) http.Handler {
	opts := mcpserver.StatusOptions{Caller: mcpserver.CallerFrom(local), Approvals: approvals, Logger: logger}
	if trail != nil {
		opts.AuditTail = trail.Tail
	}
	return mcpserver.StatusAPI(e, opts, next)
}
