//go:build !lite

package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/profiles"
)

// serve ships its audit lines to audit.remote_sink.
func TestAuditRemoteSinkWired(t *testing.T) {
	got := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
	}))
	defer srv.Close()
	m := &manifest.Manifest{Audit: &manifest.Audit{Enabled: true, RemoteSink: &manifest.RemoteSink{Type: "http", Address: srv.URL}}}
	quiet := slog.New(slog.DiscardHandler)
	d, opts, err := openDurable(serveConfig{stateDir: filepath.Join(t.TempDir(), "state"), simulate: true}, profiles.Full, m, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close(quiet)
	opts.Audit(engine.AuditEntry{Tool: "do_vent_fan", Status: "ok"})
	for deadline := time.After(10 * time.Second); ; {
		select {
		case body := <-got:
			if strings.Contains(body, `"tool":"do_vent_fan"`) {
				return
			}
		case <-deadline:
			t.Fatal("the do_* line did not reach the sink")
		}
	}
}
