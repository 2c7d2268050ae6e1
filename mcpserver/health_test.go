package mcpserver_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/physmcp/physmcpd/mcpserver"
)

func TestHealth(t *testing.T) {
	var failing atomic.Bool
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "needs a token", http.StatusUnauthorized) })
	var log bytes.Buffer
	srv := httptest.NewServer(mcpserver.Health(func(context.Context) error {
		if failing.Load() {
			return errors.New("bus plc wedged at 10.0.0.5:502")
		}
		return nil
	}, slog.New(slog.NewTextHandler(&log, nil)), next))
	defer srv.Close()
	get := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(body))
	}
	if code, body := get(http.MethodGet, mcpserver.HealthPath); code != 200 || body != `{"status":"ok"}` {
		t.Fatalf("healthy: %d %s", code, body)
	}
	failing.Store(true)
	// unhealthy, and the reason (addresses) stays in the log
	for range 3 {
		if code, body := get(http.MethodGet, mcpserver.HealthPath); code != 503 || strings.Contains(body, "10.0.0.5") {
			t.Fatalf("unhealthy: %d %s", code, body)
		}
	}
	if n := strings.Count(log.String(), "10.0.0.5"); n != 1 {
		t.Fatalf("the reason was logged %d times, want once:\n%s", n, log.String())
	}
	if code, _ := get(http.MethodPost, mcpserver.HealthPath); code != 405 {
		t.Fatalf("POST: %d", code)
	}
	if code, _ := get(http.MethodGet, "/mcp"); code != 401 {
		t.Fatalf("other paths go on: %d", code)
	}
}
