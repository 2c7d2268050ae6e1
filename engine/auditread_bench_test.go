package engine_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/audit"
	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
)

// BenchmarkReadAuditAll is what defaults.audit_all costs a read: off, into a
// sink that only keeps the entry, and into the real trail (one fsync a line).
func BenchmarkReadAuditAll(b *testing.B) {
	path := filepath.Join(b.TempDir(), "bench.manifest.yml")
	if err := os.WriteFile(path, fmt.Appendf(nil, benchManifest, "127.0.0.1:1"), 0o600); err != nil {
		b.Fatal(err)
	}
	m, diags := manifest.Load(path)
	if m == nil {
		b.Fatalf("manifest: %s", diags)
	}
	trail, err := audit.Open(b.TempDir(), 0, time.Now)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = trail.Close() })
	sinks := []struct {
		name string
		on   bool
		fn   func(engine.AuditEntry)
	}{
		{"off", false, func(engine.AuditEntry) {}},
		{"memory", true, func(engine.AuditEntry) {}},
		{"trail", true, func(a engine.AuditEntry) {
			if err := trail.Append(a); err != nil {
				b.Fatal(err)
			}
		}},
	}
	for _, s := range sinks {
		p := &policy.Policy{Defaults: &policy.Defaults{AuditAll: s.on}}
		e, err := engine.New(m, p, map[string]drivers.Bus{"plc": instantBus{}}, engine.Options{Logger: quiet, Audit: s.fn})
		if err != nil {
			b.Fatal(err)
		}
		for _, tool := range []string{"read_level_live", "read_level"} {
			b.Run(s.name+"/"+tool, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					benchRead(b, e, tool)
				}
			})
		}
		_ = e.Close()
	}
}
