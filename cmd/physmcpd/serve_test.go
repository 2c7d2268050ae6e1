//go:build !lite

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/promcp"
)

const (
	serveExampleManifest = "../../examples/physmcp.manifest.yml"
	serveExamplePolicy   = "../../examples/physmcp.policy.yml"
)

func TestCheckListenAddr(t *testing.T) {
	cases := []struct {
		addr        string
		allowRemote bool
		want        string // "" = accepted
	}{
		{"127.0.0.1:8765", false, ""},
		{"[::1]:8765", false, ""},
		{"localhost:0", false, ""},
		{"0.0.0.0:8765", false, "not a loopback address"},
		{":8765", false, "not a loopback address"},
		{"192.168.1.20:8765", false, "needs identity providers in the policy"},
		{"0.0.0.0:8765", true, ""},
		{"8765", false, "want HOST:PORT"},
		{"127.0.0.1:", false, "the port is missing"},
	}
	for _, c := range cases {
		err := checkListenAddr(c.addr, c.allowRemote)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.addr, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s (allow-remote %v): got %v, want an error containing %q", c.addr, c.allowRemote, err, c.want)
		}
	}
}

func TestServeUsageErrors(t *testing.T) {
	cases := map[string][]string{
		"--manifest is required":                  {"--stdio"},
		"give one of --stdio, --serial or --http": {"--manifest", "m.yml", "--stdio", "--http", "127.0.0.1:1"},
		"--baud 0: must be positive":              {"--manifest", "m.yml", "--serial", "/dev/ttyS0", "--baud", "0"},
		`--log-level "loud"`:                      {"--manifest", "m.yml", "--log-level", "loud"},
		"not a loopback address":                  {"--manifest", "m.yml", "--http", "0.0.0.0:1"},
		`unexpected argument "extra"`:             {"--manifest", "m.yml", "extra"},
		"flag provided but not defined: -tcp":     {"--manifest", "m.yml", "--tcp"},
		"--max-sessions 0: must be positive":      {"--manifest", "m.yml", "--max-sessions", "0"},
		"--session-idle-timeout 0s: must be":      {"--manifest", "m.yml", "--session-idle-timeout", "0"},
		"--body-timeout -1s: must be positive":    {"--manifest", "m.yml", "--body-timeout", "-1s"},
	}
	for want, args := range cases {
		var stderr bytes.Buffer
		if code := run(append([]string{"serve"}, args...), io.Discard, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("%v: stderr %q lacks %q", args, stderr.String(), want)
		}
	}
	var stderr bytes.Buffer
	if code := run([]string{"serve", "--manifest", "missing.yml"}, io.Discard, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "missing.yml") {
		t.Errorf("missing manifest: exit %d, stderr %q", code, stderr.String())
	}
}

// serveLogBuffer is a bytes.Buffer the server may log to while the test reads it.
type serveLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *serveLogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *serveLogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serveInBackground runs serve with args until the test ends or the returned
// cancel is called, and returns the endpoint URL it logged, its log and its
// exit code's channel.
func serveInBackground(t *testing.T, args []string) (url string, cancel context.CancelFunc, log *serveLogBuffer, exit <-chan int) {
	t.Helper()
	cfg, code := parseServe(args, io.Discard)
	if code >= 0 {
		t.Fatalf("parse: exit %d", code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	log = &serveLogBuffer{}
	done, stopped := make(chan int, 1), make(chan struct{})
	go func() {
		done <- serve(ctx, cfg, strings.NewReader(""), io.Discard, log)
		close(stopped)
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})
	listening := regexp.MustCompile(`url=(https?://\S+)`)
	for deadline := time.Now().Add(10 * time.Second); url == ""; time.Sleep(10 * time.Millisecond) {
		if m := listening.FindStringSubmatch(log.String()); m != nil {
			url = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("server did not start: %s", log.String())
		}
	}
	return url, cancel, log, done
}

// TestServeHTTPShutsDownCleanly serves the example over HTTP on a free
// loopback port, makes one call and cancels, as SIGTERM does.
func TestServeHTTPShutsDownCleanly(t *testing.T) {
	url, cancel, stderr, exit := serveInBackground(t, []string{"--manifest", serveExampleManifest, "--policy", serveExamplePolicy, "--simulate", "--http", "127.0.0.1:0"})
	// Liveness needs no token.
	health, err := http.Get(strings.TrimSuffix(url, mcpserver.EndpointPath) + mcpserver.HealthPath)
	if err != nil {
		t.Fatal(err)
	}
	health.Body.Close()
	if health.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d", mcpserver.HealthPath, health.StatusCode)
	}
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	// The example policy names static tokens, so HTTP callers authenticate.
	req.Header.Set("Authorization", "Bearer operator-example-token-do-not-use")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "greenhouse_controller_01") {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}

	cancel()
	select {
	case code := <-exit:
		if code != 0 {
			t.Errorf("exit %d after shutdown: %s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
	if !strings.Contains(stderr.String(), "msg=stopped") {
		t.Errorf("no clean stop logged: %s", stderr.String())
	}
}

func TestToolsJSON(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"tools", "--manifest", serveExampleManifest, "--policy", serveExamplePolicy, "--json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var list struct {
		Device struct {
			ID string `json:"id"`
		} `json:"device"`
		PromcpBase string `json:"promcp_base"`
		Tools      []struct {
			Name           string          `json:"name"`
			Description    string          `json:"description"`
			InputSchema    json.RawMessage `json:"inputSchema"`
			OutputSchema   json.RawMessage `json:"outputSchema"`
			ResponseSchema json.RawMessage `json:"responseSchema"`
			Annotations    map[string]any  `json:"annotations"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if list.Device.ID != "greenhouse_controller_01" || list.PromcpBase != "0.2.0" || len(list.Tools) != 8 {
		t.Fatalf("device %q, promcp_base %q, %d tools", list.Device.ID, list.PromcpBase, len(list.Tools))
	}
	for _, tool := range list.Tools {
		if !bytes.Equal(tool.ResponseSchema, tool.OutputSchema) {
			t.Errorf("%s: responseSchema differs from outputSchema", tool.Name)
		}
		for name, schema := range map[string]json.RawMessage{"input": tool.InputSchema, "output": tool.OutputSchema} {
			if _, err := promcp.CompileSchema(schema); err != nil {
				t.Errorf("%s %sSchema: %v", tool.Name, name, err)
			}
		}
		for _, hint := range []string{"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint", "title"} {
			if _, ok := tool.Annotations[hint]; !ok {
				t.Errorf("%s: annotation %s missing", tool.Name, hint)
			}
		}
		if tool.Description == "" {
			t.Errorf("%s: no description", tool.Name)
		}
	}
	if stderr.Len() != 0 {
		t.Errorf("unexpected stderr: %s", stderr.String())
	}
}

func TestToolsTable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"tools", "--manifest", serveExampleManifest}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"device greenhouse_controller_01", "TOOL", "do_heater_setpoint", "can_do"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
