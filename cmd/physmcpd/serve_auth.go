//go:build !lite

package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/physmcp/physmcpd/audit"
	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/metrics"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/telemetry"
)

// accessFlags are serve's flags for who may use the HTTP endpoints and how
// much of the server one caller may hold.
type accessFlags struct {
	tlsCert, tlsKey string
	overrideKey     string
	origins         stringList
	maxBody         int64
	bodyTimeout     time.Duration
	maxSessions     int
	sessionIdle     time.Duration
	metricsPublic   bool
}

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func (f *accessFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.tlsCert, "tls-cert", "", "serve HTTPS with this certificate (PEM); needs --tls-key")
	fs.StringVar(&f.tlsKey, "tls-key", "", "private key (PEM) for --tls-cert")
	fs.StringVar(&f.overrideKey, "override-key", "", "key file that verifies emergency override tokens (see physmcpd token override)")
	fs.Var(&f.origins, "allow-origin", "a browser Origin allowed besides loopback and same-origin ones, e.g. https://console.example.com (repeatable)")
	fs.Int64Var(&f.maxBody, "max-body", mcpserver.DefaultMaxBodyBytes, "largest HTTP request body in bytes (larger ones get 413)")
	fs.DurationVar(&f.bodyTimeout, "body-timeout", mcpserver.DefaultBodyTimeout, "time an HTTP client has to send a request body after its headers (then 408 and the connection closes)")
	fs.IntVar(&f.maxSessions, "max-sessions", mcpserver.DefaultMaxSessions, "most MCP sessions open at once over HTTP; an initialize beyond them gets 503")
	fs.DurationVar(&f.sessionIdle, "session-idle-timeout", mcpserver.DefaultSessionIdleTimeout, "an HTTP MCP session without a request for this long is released (its client must initialize again)")
	fs.BoolVar(&f.metricsPublic, "metrics-public", false, "serve "+metrics.Path+" without authentication (a scraper on a trusted network); by default it takes the same bearer token as "+mcpserver.EndpointPath)
}

func (f *accessFlags) sessionLimits() mcpserver.SessionLimits {
	return mcpserver.SessionLimits{IdleTimeout: f.sessionIdle, MaxSessions: f.maxSessions}
}

// check validates the flags that need no files.
func (f *accessFlags) check() error {
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if f.maxBody <= 0 {
		return fmt.Errorf("--max-body %d: must be positive", f.maxBody)
	}
	if f.bodyTimeout <= 0 {
		return fmt.Errorf("--body-timeout %s: must be positive", f.bodyTimeout)
	}
	if f.maxSessions <= 0 {
		return fmt.Errorf("--max-sessions %d: must be positive", f.maxSessions)
	}
	if f.sessionIdle <= 0 {
		return fmt.Errorf("--session-idle-timeout %s: must be positive", f.sessionIdle)
	}
	return nil
}

func (f *accessFlags) tls() bool { return f.tlsCert != "" }

// httpAccess builds the HTTP access rules: the authenticator from the
// policy's identity and emergency sections, and the refusal to listen beyond
// loopback without authentication.
// Emergency overrides are always audited: logged, and appended to the audit
// trail when one is kept.
func httpAccess(cfg serveConfig, m *manifest.Manifest, p *policy.Policy, e *engine.Engine, trail *audit.Log, logger *slog.Logger) (mcpserver.Access, error) {
	f := cfg.access
	var key []byte
	if f.overrideKey != "" {
		data, err := os.ReadFile(f.overrideKey)
		if err != nil {
			return mcpserver.Access{}, fmt.Errorf("--override-key: %w", err)
		}
		key = bytes.TrimSpace(data)
		if p == nil || p.Emergency == nil {
			return mcpserver.Access{}, errors.New("--override-key given, but the policy has no emergency section: overrides are not allowed")
		}
	} else if p != nil && p.Emergency != nil {
		logger.Warn("the policy allows emergency overrides but --override-key was not given: override tokens are refused")
	}
	logOverride := auth.LogAudit(logger)
	auditOverride := func(ev auth.AuditEvent) {
		logOverride(ev)
		if trail == nil {
			return
		}
		if err := trail.Append(ev); err != nil {
			logger.Error("emergency override not recorded in the audit trail", "event", ev.Kind, "err", err)
		}
	}
	var meshKeys [][]byte
	if ms := meshOf(m); ms != nil {
		var err error
		if meshKeys, err = ms.LoadKeys(m.File); err != nil {
			return mcpserver.Access{}, fmt.Errorf("network.mesh.key_file: %v", err)
		}
		if p == nil || p.Identity == nil || p.Identity.Mesh == nil {
			logger.Warn("the mesh is enabled but the policy has no identity.mesh: peers' forwarded can_do queries are refused, so this node answers for itself only")
		}
	}
	a, err := auth.New(p, auth.Options{DeviceID: m.Device.ID, OverrideKey: key, Audit: auditOverride, Logger: logger, MeshKeys: meshKeys})
	if err != nil {
		return mcpserver.Access{}, err
	}
	if f.tls() {
		if _, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey); err != nil {
			return mcpserver.Access{}, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
	}
	if a.AcceptsClientCertificates() && !f.tls() {
		return mcpserver.Access{}, errors.New("the policy has an mtls identity provider, which needs HTTPS: give --tls-cert and --tls-key")
	}
	host, _, _ := net.SplitHostPort(cfg.httpAddr)
	switch remote := !isLoopback(host); {
	case remote && !a.Required():
		return mcpserver.Access{}, fmt.Errorf("--http %s reaches beyond this machine, but the policy names no identity providers: "+
			"every caller would act unauthenticated; add identity.providers to the policy (see docs/security.md)", cfg.httpAddr)
	case remote && !f.tls():
		logger.Warn("serving HTTP beyond loopback without TLS: bearer tokens cross the network in clear; give --tls-cert and --tls-key")
	}
	if a.Required() {
		logger.Info("HTTP callers must authenticate", "providers", len(p.Identity.Providers))
	} else {
		logger.Info("HTTP callers are not authenticated (no identity providers): loopback only, with the local role", "role", p.LocalRole())
	}
	return mcpserver.Access{
		Auth:           a,
		Local:          auth.Principal{Name: "local", Role: p.LocalRole(), Method: auth.MethodLocal},
		Permits:        mcpserver.RolePermits(e),
		Refused:        e.NoteRefused,
		AllowedOrigins: f.origins,
		MaxBodyBytes:   f.maxBody,
		BodyTimeout:    f.bodyTimeout,
		ResourceName:   m.Device.ID,
		Logger:         logger,
	}, nil
}

// serveFilesReadable prints every identity file serve needs and cannot
// read, from the policy and from its flags, and the manifest's telemetry
// files, so that serve stops before it opens a bus.
func serveFilesReadable(m *manifest.Manifest, p *policy.Policy, f accessFlags, stderr io.Writer) bool {
	diags := identityFileDiags(p)
	printDiags(stderr, diags)
	ok := !diags.HasErrors()
	if m.Telemetry != nil {
		if _, err := telemetry.Options(m); err != nil {
			fmt.Fprintf(stderr, "physmcpd serve: %s: %v\n", m.File, err)
			ok = false
		}
	}
	for _, flagFile := range []struct{ name, path string }{{"--override-key", f.overrideKey}, {"--tls-cert", f.tlsCert}, {"--tls-key", f.tlsKey}} {
		if flagFile.path == "" {
			continue
		}
		if err := readableFile(flagFile.path); err != nil {
			fmt.Fprintf(stderr, "physmcpd serve: %s: %v\n", flagFile.name, err)
			ok = false
		}
	}
	return ok
}
