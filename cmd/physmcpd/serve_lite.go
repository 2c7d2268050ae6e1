//go:build lite

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver/litemcp"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/profiles"
)

// The Lite build (-tags lite) serves the lite profile only: read_* and
// can_do on stdio or a serial line through litemcp. It links no HTTP server,
// no authentication, no state store and no audit trail, so the flags for
// them are refused by name rather than unknown, and what serve asks of them
// is empty here.

// The Lite build serves nothing but the lite profile, so its runtime limits
// hold from the start: loading the manifest and building the tools' schemas
// would otherwise grow the heap under Go's defaults, and those pages stay
// resident.
func init() { applyRuntime(profiles.Lite) }

const serveTransports = "stdio or a serial line"

const serveUsage = "[--profile lite] [--stdio | --serial PORT [--baud N]]"

// fullOnlyFlags are serve's flags that only the Full build has.
var fullOnlyFlags = []struct {
	name   string
	isBool bool
}{
	{"http", false}, {"allow-remote", true}, {"tls-cert", false}, {"tls-key", false}, {"override-key", false},
	{"allow-origin", false}, {"max-body", false}, {"body-timeout", false}, {"max-sessions", false},
	{"session-idle-timeout", false}, {"state-dir", false}, {"audit-key", false}, {"metrics-public", true},
}

// refusedFlag fails when it is given, naming the build that has it.
type refusedFlag struct {
	name   string
	isBool bool
}

func (f refusedFlag) String() string   { return "" }
func (f refusedFlag) IsBoolFlag() bool { return f.isBool }
func (f refusedFlag) Set(string) error {
	return fmt.Errorf("this is the lite build of physmcpd (read_* and can_do on --stdio or --serial; no HTTP server, "+
		"authentication or state directory): --%s needs the full build (physmcpd-TARGET, not physmcpd-lite-TARGET)", f.name)
}

func addBuildFlags(fs *flag.FlagSet, _ *serveConfig) {
	for _, f := range fullOnlyFlags {
		fs.Var(refusedFlag(f), f.name, "not in the lite build (full build only)")
	}
}

func checkBuildFlags(serveConfig) error { return nil }

// accessFlags are the HTTP access flags: none in the Lite build.
type accessFlags struct{}

// serveFilesReadable: the Lite build reads no identity, key or certificate
// files; it refuses a manifest that asks for telemetry, having no network
// client, before it opens a bus.
func serveFilesReadable(m *manifest.Manifest, _ *policy.Policy, _ accessFlags, stderr io.Writer) bool {
	if m.Telemetry != nil {
		fmt.Fprintf(stderr, "physmcpd serve: %s: telemetry.mqtt: this is the lite build of physmcpd, which publishes no telemetry; use the full build (physmcpd-TARGET)\n", m.File)
		return false
	}
	return true
}

// durable is what serve keeps on disk: nothing in the Lite build.
type durable struct{}

func openDurable(serveConfig, profiles.Profile, *manifest.Manifest, *slog.Logger) (*durable, engine.Options, error) {
	return &durable{}, engine.Options{}, nil
}

func (*durable) close(*slog.Logger)        {}
func (*durable) recoverAudit(*slog.Logger) {}

// startTelemetry publishes nothing: serveFilesReadable refused telemetry.
func startTelemetry(*engine.Engine, *slog.Logger) (func(), error) { return func() {}, nil }

// meshNode is this node's part in a mesh: none in the Lite build, which
// cannot join one (checkMesh refuses the manifest first).
type meshNode struct{}

func meshFor(*manifest.Manifest, *engine.Options, *durable, *slog.Logger) (*meshNode, error) {
	return nil, nil
}

// serveMCP serves e's read_* and can_do tools through litemcp under the
// profile's bounds.
func serveMCP(ctx context.Context, cfg serveConfig, prof profiles.Profile, e *engine.Engine, _ *durable, _ *meshNode, local engine.Caller, stdin io.Reader, stdout io.Writer, logger *slog.Logger) int {
	s, err := litemcp.New(e, litemcp.Options{
		Version: buildVersion, Caller: local, Group: cfg.group, Logger: logger,
		Workers: prof.Workers, Queue: prof.Queue, MaxMessageBytes: prof.MaxMessageBytes,
	})
	if err != nil {
		logger.Error("cannot build the MCP server", "err", err)
		return 1
	}
	return serveStream(ctx, cfg, e, s.Serve, stdin, stdout, logger)
}
