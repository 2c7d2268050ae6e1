//go:build !lite

package mcpserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/promcp"
)

const (
	exampleManifest = "../examples/physmcp.manifest.yml"
	examplePolicy   = "../examples/physmcp.policy.yml"
)

var exampleTools = []string{
	"can_do", "do_heater_setpoint", "do_vent_fan", "read_air_temperature", "read_door_closed",
	"read_heater_energy", "read_heater_flow_temperature", "read_heater_setpoint",
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
}

// loadDevice loads a manifest and its policy, failing the test on any error.
func loadDevice(t testing.TB, manifestPath, policyPath string) (*manifest.Manifest, *policy.Policy) {
	t.Helper()
	m, diags := manifest.Load(manifestPath)
	if m == nil || diags.HasErrors() {
		t.Fatalf("manifest: %v", diags)
	}
	p, diags := policy.Load(policyPath, m)
	if p == nil || diags.HasErrors() {
		t.Fatalf("policy: %v", diags)
	}
	return m, p
}

func loadExample(t testing.TB) (*manifest.Manifest, *policy.Policy) {
	t.Helper()
	return loadDevice(t, exampleManifest, examplePolicy)
}

// simEngine binds m to simulated buses, as `physmcpd serve --simulate` does;
// wrap, when given, may replace buses (to count or break them) first.
func simEngine(t testing.TB, m *manifest.Manifest, p *policy.Policy, wrap func(map[string]drivers.Bus)) *engine.Engine {
	t.Helper()
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.Open, true)
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		wrap(buses)
	}
	e, err := engine.New(m, p, buses, engine.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// startDevice serves the device with every bus simulated and the local role.
func startDevice(t testing.TB, m *manifest.Manifest, p *policy.Policy) (*engine.Engine, *server.MCPServer) {
	t.Helper()
	e := simEngine(t, m, p, nil)
	local := engine.Caller{Identity: "local", Role: p.LocalRole()}
	s, err := mcpserver.New(e, mcpserver.Options{
		Version: "test",
		Logger:  quietLogger(),
		Caller:  func(context.Context) engine.Caller { return local },
	})
	if err != nil {
		t.Fatal(err)
	}
	return e, s
}

func inProcessClient(t testing.TB, s *server.MCPServer) *client.Client {
	t.Helper()
	c, err := client.NewInProcessClient(s)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	return c
}

func httpClient(t testing.TB, s *server.MCPServer, opts ...client.ClientOption) *client.Client {
	t.Helper()
	ts := httptest.NewServer(mcpserver.NewHTTPHandler(s, quietLogger()))
	t.Cleanup(ts.Close)
	tr, err := transport.NewStreamableHTTP(ts.URL + mcpserver.EndpointPath)
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr, opts...)
	start(t, c)
	return c
}

func start(t testing.TB, c *client.Client) {
	t.Helper()
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "physmcpd-e2e", Version: "test"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
}

// session is a client plus the output schemas it was given, so that every
// call's structuredContent is checked against its tool's outputSchema.
type session struct {
	t       *testing.T
	c       *client.Client
	schemas map[string]json.RawMessage
}

func listTools(t *testing.T, c *client.Client) ([]mcp.Tool, *session) {
	t.Helper()
	res, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	s := &session{t: t, c: c, schemas: map[string]json.RawMessage{}}
	for _, tool := range res.Tools {
		raw, err := json.Marshal(tool.OutputSchema)
		if err != nil {
			t.Fatal(err)
		}
		s.schemas[tool.Name] = raw
	}
	return res.Tools, s
}

// call invokes a tool and checks the result's shape: structuredContent valid
// against the outputSchema, the text block the same JSON, isError as expected.
func (s *session) call(tool string, args map[string]any, wantError bool) map[string]any {
	s.t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := s.c.CallTool(context.Background(), req)
	if err != nil {
		s.t.Fatalf("%s: %v", tool, err)
	}
	body, err := json.Marshal(res.StructuredContent)
	if err != nil {
		s.t.Fatal(err)
	}
	if res.StructuredContent == nil {
		s.t.Fatalf("%s: no structuredContent", tool)
	}
	if err := promcp.Validate(s.schemas[tool], body); err != nil {
		s.t.Errorf("%s: structuredContent does not match the outputSchema: %v\n%s", tool, err, body)
	}
	if len(res.Content) != 1 {
		s.t.Fatalf("%s: %d content blocks, want 1", tool, len(res.Content))
	}
	text, ok := res.Content[0].(mcp.TextContent)
	if !ok {
		s.t.Fatalf("%s: content is %T, want text", tool, res.Content[0])
	}
	var fromText, fromStructured map[string]any
	if err := json.Unmarshal([]byte(text.Text), &fromText); err != nil {
		s.t.Fatalf("%s: text is not JSON: %v", tool, err)
	}
	if err := json.Unmarshal(body, &fromStructured); err != nil {
		s.t.Fatal(err)
	}
	if !jsonEqual(fromText, fromStructured) {
		s.t.Errorf("%s: text and structuredContent differ:\n%s\n%s", tool, text.Text, body)
	}
	if res.IsError != wantError {
		s.t.Errorf("%s: isError = %v, want %v: %s", tool, res.IsError, wantError, body)
	}
	if strings.HasPrefix(tool, "can_do") {
		checkReportInvariants(s.t, fromStructured)
	}
	return fromStructured
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// checkReportInvariants: feasible is derived, never asserted, and a false one is explained.
func checkReportInvariants(t *testing.T, rep map[string]any) {
	t.Helper()
	allowed := false
	for _, c := range rep["candidates"].([]any) {
		if c.(map[string]any)["permission"] == "allowed" {
			allowed = true
		}
	}
	unroutable := len(rep["unroutable"].([]any))
	if want := allowed && unroutable == 0; rep["feasible"] != want {
		t.Errorf("feasible = %v, want %v (some candidate allowed: %v, unroutable: %d)", rep["feasible"], want, allowed, unroutable)
	}
	if rep["feasible"] == false && unroutable == 0 && len(rep["blocked"].([]any)) == 0 {
		t.Errorf("feasible is false with neither blocked nor unroutable entries")
	}
}

func TestToolsList(t *testing.T) {
	m, p := loadExample(t)
	_, s := startDevice(t, m, p)
	tools, _ := listTools(t, inProcessClient(t, s))
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
		a := tool.Annotations
		if a.ReadOnlyHint == nil || a.DestructiveHint == nil || a.IdempotentHint == nil || a.OpenWorldHint == nil || a.Title == "" || tool.Title == "" {
			t.Errorf("%s: annotations not all explicit: %+v", tool.Name, a)
			continue
		}
		if tool.OutputSchema.Type != "object" || len(tool.OutputSchema.Properties) == 0 {
			t.Errorf("%s: no outputSchema", tool.Name)
		}
		if tool.InputSchema.Type != "object" {
			t.Errorf("%s: inputSchema type %q", tool.Name, tool.InputSchema.Type)
		}
		readOnly := !strings.HasPrefix(tool.Name, "do_")
		if *a.ReadOnlyHint != readOnly || *a.IdempotentHint != true {
			t.Errorf("%s: readOnly=%v idempotent=%v", tool.Name, *a.ReadOnlyHint, *a.IdempotentHint)
		}
		// Every do_ of the example is compensable (it writes a value that can be written back).
		if *a.DestructiveHint {
			t.Errorf("%s: destructive, want not destructive", tool.Name)
		}
		if strings.HasPrefix(tool.Name, "do_") {
			if _, ok := tool.InputSchema.Properties["idempotency_key"]; !ok {
				t.Errorf("%s: no idempotency_key in the input schema", tool.Name)
			}
			if !strings.Contains(tool.Description, "can_do first") || !strings.Contains(tool.Description, "same idempotency_key") {
				t.Errorf("%s: description lacks the can_do / retry contract: %s", tool.Name, tool.Description)
			}
		}
	}
	sort.Strings(names)
	if !slices.Equal(names, exampleTools) {
		t.Errorf("tools = %v, want %v", names, exampleTools)
	}
}

func TestCanonicalLoop(t *testing.T) {
	transports := []struct {
		name    string
		connect func(*testing.T, *server.MCPServer) *client.Client
	}{
		{"inprocess", func(t *testing.T, s *server.MCPServer) *client.Client { return inProcessClient(t, s) }},
		{"http", func(t *testing.T, s *server.MCPServer) *client.Client { return httpClient(t, s) }},
		{"http-2025-06-18", func(t *testing.T, s *server.MCPServer) *client.Client {
			return httpClient(t, s, client.WithProtocolVersion(mcp.ProtocolVersion20250618))
		}},
		{"http-2025-03-26", func(t *testing.T, s *server.MCPServer) *client.Client {
			return httpClient(t, s, client.WithProtocolVersion(mcp.ProtocolVersion20250326))
		}},
	}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			m, p := loadExample(t)
			_, srv := startDevice(t, m, p)
			runLoop(t, tr.connect(t, srv))
		})
	}
}

func runLoop(t *testing.T, c *client.Client) {
	tools, s := listTools(t, c)
	if len(tools) != len(exampleTools) {
		t.Fatalf("%d tools", len(tools))
	}

	// 1. can_do: what would setting the heater to 21 °C take?
	intent := map[string]any{"intent": map[string]any{
		"semantic_tags": []any{"heating", "setpoint"}, "action": "set", "target": "heater_setpoint", "value": 21,
	}}
	rep := s.call("can_do", intent, false)
	cand := findEntry(rep["candidates"], "do_heater_setpoint")
	if cand == nil {
		t.Fatalf("do_heater_setpoint is not a candidate: %v", rep)
	}
	if cand["permission"] != "allowed" || cand["confidence"].(float64) < 0.7 || rep["feasible"] != true {
		t.Errorf("candidate not allowed with confidence >= 0.7: %v", cand)
	}
	validUntil, err := time.Parse(time.RFC3339Nano, cand["valid_until"].(string))
	if err != nil || !validUntil.After(time.Now()) {
		t.Errorf("valid_until %v is not in the future (%v)", cand["valid_until"], err)
	}

	// 2. every read_* in parallel.
	var wg sync.WaitGroup
	var mu sync.Mutex
	reads := map[string]map[string]any{}
	for _, tool := range exampleTools {
		if !strings.HasPrefix(tool, "read_") {
			continue
		}
		wg.Go(func() {
			r := s.call(tool, nil, false)
			mu.Lock()
			reads[tool] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	for tool, r := range reads {
		if r["quality"] != "good" {
			t.Errorf("%s: quality %v: %v", tool, r["quality"], r)
		}
	}
	if v := reads["read_heater_setpoint"]["value"]; v != 18.0 {
		t.Errorf("read_heater_setpoint before the change = %v, want 18", v)
	}

	// 3. act.
	args := map[string]any{"value": 21, "idempotency_key": "e2e-loop-1"}
	done := s.call("do_heater_setpoint", args, false)
	if done["status"] != "success" || done["previous_value"] != 18.0 || done["applied_value"] != 21.0 || done["idempotency_key"] != "e2e-loop-1" {
		t.Errorf("do_heater_setpoint: %v", done)
	}
	if done["compensable"] != true || !strings.Contains(fmt.Sprint(done["compensation_hint"]), "do_heater_setpoint") {
		t.Errorf("do_heater_setpoint: no usable compensation: %v", done)
	}

	// 4. verify.
	after := s.call("read_heater_setpoint", nil, false)
	if after["value"] != 21.0 || after["quality"] != "good" {
		t.Errorf("read_heater_setpoint after the change: %v", after)
	}

	// A retry with the same key returns the first outcome and acts not again.
	again := s.call("do_heater_setpoint", args, false)
	if !jsonEqual(again, done) {
		t.Errorf("retry with the same key changed the outcome:\n%v\n%v", done, again)
	}

	// The cooldown now blocks another change, and can_do says so.
	rep = s.call("can_do", intent, false)
	if b := findEntry(rep["blocked"], "do_heater_setpoint"); b == nil || b["permission"] != "cooldown_active" {
		t.Errorf("do_heater_setpoint is not blocked by its cooldown: %v", rep)
	}

	// Refusals are failed do_ bodies with isError set, valid against the schema.
	refused := s.call("do_heater_setpoint", map[string]any{"value": 40, "idempotency_key": "e2e-loop-2"}, true)
	if refused["status"] != "failed" || refused["permission"] != "out_of_range" || refused["applied_value"] != nil {
		t.Errorf("value 40: %v", refused)
	}
	bad := s.call("do_heater_setpoint", map[string]any{"value": 21, "idempotency_key": 7}, true)
	if bad["status"] != "failed" || !strings.Contains(bad["reason"].(string), "idempotency_key") {
		t.Errorf("numeric key: %v", bad)
	}
	if missing := s.call("do_vent_fan", nil, true); missing["status"] != "failed" {
		t.Errorf("no value: %v", missing)
	}
	extra := s.call("do_vent_fan", map[string]any{"value": true, "force": true}, true)
	if extra["status"] != "failed" || !strings.Contains(extra["reason"].(string), "force") {
		t.Errorf("unknown argument: %v", extra)
	}
	readArgs := s.call("read_air_temperature", map[string]any{"zone": "a"}, true)
	if readArgs["quality"] != "error" || readArgs["value"] != nil {
		t.Errorf("read with arguments: %v", readArgs)
	}

	// A malformed can_do is unroutable, not an error.
	malformed := s.call("can_do", map[string]any{"intent": map[string]any{"semantic_tags": []any{}}}, false)
	u := malformed["unroutable"].([]any)
	if len(u) != 1 || u[0].(map[string]any)["reason"] != "malformed_request" {
		t.Errorf("malformed can_do: %v", malformed)
	}
	// PhysMCP aliases.
	alias := s.call("can_do", map[string]any{"query": map[string]any{"semantic_tags": []any{"door"}, "direction": "read"}}, false)
	if findEntry(alias["candidates"], "read_door_closed") == nil {
		t.Errorf("query/direction aliases: read_door_closed not found: %v", alias)
	}
	// Exactly one of intent and query: the input schema can only say so in
	// words (model APIs refuse a top-level anyOf), so the server refuses the rest.
	door := map[string]any{"semantic_tags": []any{"door"}, "action": "read"}
	for what, args := range map[string]map[string]any{
		"neither": {"scope": []any{"read_door_closed"}},
		"both":    {"intent": door, "query": door},
	} {
		rep := s.call("can_do", args, false)
		u, _ := rep["unroutable"].([]any)
		if rep["feasible"] != false || len(u) != 1 || u[0].(map[string]any)["reason"] != "malformed_request" {
			t.Errorf("can_do with %s of intent and query: %v, want unroutable malformed_request", what, rep)
		}
	}
}

func findEntry(list any, capability string) map[string]any {
	for _, e := range list.([]any) {
		if m := e.(map[string]any); m["capability"] == capability {
			return m
		}
	}
	return nil
}

// rpc posts one JSON-RPC message and returns the decoded reply (JSON or SSE).
func rpc(t *testing.T, url string, header http.Header, body string) (*http.Response, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusAccepted || len(data) == 0 {
		return resp, nil
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				data = []byte(line)
			}
		}
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("reply %q: %v", data, err)
	}
	return resp, out
}

// TestHTTPProtocolVersions drives the HTTP transport with raw JSON-RPC, as
// an older client would, and compares tools/list with the generated schemas.
func TestHTTPProtocolVersions(t *testing.T) {
	m, p := loadExample(t)
	e, s := startDevice(t, m, p)
	ts := httptest.NewServer(mcpserver.NewHTTPHandler(s, quietLogger()))
	defer ts.Close()
	url := ts.URL + mcpserver.EndpointPath
	want, err := mcpserver.Tools(e)
	if err != nil {
		t.Fatal(err)
	}

	for _, version := range []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			resp, init := rpc(t, url, nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+version+
				`","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
			result, _ := init["result"].(map[string]any)
			if result == nil || result["protocolVersion"] != version {
				t.Fatalf("initialize: %v", init)
			}
			instructions, _ := result["instructions"].(string)
			for _, s := range []string{m.Device.ID, "promcp_base 0.2.0", "can_do", "read_*", "do_*", "idempotency_key"} {
				if !strings.Contains(instructions, s) {
					t.Errorf("instructions lack %q: %s", s, instructions)
				}
			}
			h := http.Header{}
			if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
				h.Set("Mcp-Session-Id", id)
			}
			if version >= "2025-06-18" {
				h.Set("Mcp-Protocol-Version", version)
			}
			rpc(t, url, h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			_, list := rpc(t, url, h, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
			tools := list["result"].(map[string]any)["tools"].([]any)
			if len(tools) != len(want) {
				t.Fatalf("tools/list: %d tools, want %d", len(tools), len(want))
			}
			// mcp-go lists tools by name, not in manifest order.
			byName := map[string]map[string]any{}
			for _, raw := range tools {
				got := raw.(map[string]any)
				byName[got["name"].(string)] = got
			}
			for i := range want {
				got := byName[want[i].Name]
				var in, out any
				json.Unmarshal(want[i].RawInputSchema, &in)
				json.Unmarshal(want[i].RawOutputSchema, &out)
				if got == nil || !jsonEqual(got["inputSchema"], in) || !jsonEqual(got["outputSchema"], out) {
					t.Errorf("tools/list entry for %s differs from the generated tool: %v", want[i].Name, got)
					continue
				}
				if _, err := promcp.CompileSchema(got["inputSchema"]); err != nil {
					t.Errorf("%s inputSchema: %v", want[i].Name, err)
				}
				if _, err := promcp.CompileSchema(got["outputSchema"]); err != nil {
					t.Errorf("%s outputSchema: %v", want[i].Name, err)
				}
			}
		})
	}

	t.Run("dns-rebinding", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "attacker.example"
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("foreign Host header: status %d, want 403", resp.StatusCode)
		}
	})
}

func TestServeStdio(t *testing.T) {
	m, p := loadExample(t)
	_, s := startDevice(t, m, p)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- mcpserver.ServeStdio(context.Background(), s, inR, outW)
		outW.Close()
	}()
	replies := bufio.NewScanner(outR)
	replies.Buffer(make([]byte, 1<<20), 1<<20)
	send := func(msg string) map[string]any {
		t.Helper()
		if _, err := io.WriteString(inW, msg+"\n"); err != nil {
			t.Fatal(err)
		}
		if !replies.Scan() {
			t.Fatalf("no reply to %s: %v", msg, replies.Err())
		}
		var out map[string]any
		if err := json.Unmarshal(replies.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	init := send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	if v := init["result"].(map[string]any)["protocolVersion"]; v != "2025-06-18" {
		t.Errorf("protocolVersion %v", v)
	}
	if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	call := send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read_door_closed","arguments":{}}}`)
	result := call["result"].(map[string]any)
	if sc := result["structuredContent"].(map[string]any); sc["value"] != true || sc["quality"] != "good" {
		t.Errorf("read_door_closed over stdio: %v", result)
	}
	notObject := send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"do_vent_fan","arguments":[true]}}`)
	result = notObject["result"].(map[string]any)
	if sc := result["structuredContent"].(map[string]any); result["isError"] != true || sc["status"] != "failed" ||
		!strings.Contains(sc["reason"].(string), "JSON object") {
		t.Errorf("arguments that are not an object: %v", result)
	}
	inW.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("ServeStdio after EOF: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeStdio did not return after EOF")
	}
}

// TestStdioFinishesWritesAfterEOF: a client that sends a do_ and closes
// stdin at once still gets the write done and answered; mcp-go cancels
// in-flight requests at EOF, which must not cut a bus write short.
func TestStdioFinishesWritesAfterEOF(t *testing.T) {
	m, p := loadExample(t)
	_, s := startDevice(t, m, p)
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"do_heater_setpoint","arguments":{"value":21,"idempotency_key":"eof-1"}}}`,
	}, "\n") + "\n"
	var out bytes.Buffer
	if err := mcpserver.ServeStdio(context.Background(), s, strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	var status any
	for line := range strings.SplitSeq(strings.TrimSpace(out.String()), "\n") {
		var msg map[string]any
		if err := json.Unmarshal([]byte(line), &msg); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if msg["id"] == 2.0 {
			status = msg["result"].(map[string]any)["structuredContent"].(map[string]any)["status"]
		}
	}
	if status != "success" {
		t.Errorf("do_heater_setpoint sent just before EOF: status %v\n%s", status, out.String())
	}
}

func TestReadDescriptionsDoNotSoundLikeMutations(t *testing.T) {
	m, p := loadExample(t)
	e, _ := startDevice(t, m, p)
	tools, err := mcpserver.Tools(e)
	if err != nil {
		t.Fatal(err)
	}
	mutation := []string{"create", "update", "delete", "set", "reset", "trigger", "send", "write", "insert", "modify"}
	for _, tool := range tools {
		if !strings.HasPrefix(tool.Name, "read_") {
			continue
		}
		// Only what the adapter adds is checked; the manifest's own words are the author's.
		c := m.Capabilities[slices.IndexFunc(m.Capabilities, func(c *manifest.Capability) bool { return c.ToolName() == tool.Name })]
		added := strings.ToLower(strings.TrimPrefix(tool.Description, strings.TrimSuffix(c.Description, ".")))
		for _, w := range mutation {
			if strings.Contains(added, w) {
				t.Errorf("%s: the added description contains %q: %s", tool.Name, w, added)
			}
		}
	}
}

func TestCanDoNeverFails(t *testing.T) {
	m, p := loadExample(t)
	_, s := startDevice(t, m, p)
	_, sess := listTools(t, inProcessClient(t, s))
	for _, args := range []map[string]any{
		nil,
		{"intent": "heat"},
		{"intent": map[string]any{"semantic_tags": []any{"unicorn"}}},
		{"intent": map[string]any{"semantic_tags": []any{"heating"}, "action": "explode"}},
	} {
		rep := sess.call("can_do", args, false)
		if rep["feasible"] != false || len(rep["unroutable"].([]any)) == 0 {
			t.Errorf("%v: %v", args, rep)
		}
	}
}

const kindsManifest = `physmcp_version: "0.1"
device: {id: kinds_rig_01, type: kinds_rig}
buses:
  mb: {type: modbus-tcp, address: 127.0.0.1:1502, simulated: true}
capabilities:
  - name: purge_valve
    kind: do
    description: Opens the purge valve.
    binding: {bus: mb, unit: 1, table: coil, address: 0, data_type: bool}
    data_type: bool
    semantic_tags: [purge, valve]
    side_effects: ["drains the loop"]
    compensable: false
  - name: fan_speed
    kind: do
    description: Fan speed.
    binding: {bus: mb, unit: 1, table: holding, address: 1, data_type: uint16}
    data_type: int
    unit: "%"
    range: {min: 0, max: 100}
    semantic_tags: [fan, speed]
  - name: mode
    kind: do
    description: Operating mode.
    binding: {bus: mb, unit: 1, table: holding, address: 2, data_type: uint16}
    data_type: enum
    enum_values: [off, eco, comfort]
    semantic_tags: [mode]
`

// TestToolsFollowTheManifest: annotations and input schemas come from each
// capability (compensable, data type, range, enum values).
func TestToolsFollowTheManifest(t *testing.T) {
	m, diags := manifest.Parse("kinds.manifest.yml", []byte(kindsManifest))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	e, _ := startDevice(t, m, nil)
	tools, err := mcpserver.Tools(e)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]mcp.Tool{}
	for _, tool := range tools {
		byName[tool.Name] = tool
	}
	if d := byName["do_purge_valve"].Annotations.DestructiveHint; d == nil || !*d {
		t.Error("do_purge_valve (compensable: false) is not marked destructive")
	}
	if !strings.Contains(byName["do_purge_valve"].Description, "Not compensable") {
		t.Errorf("do_purge_valve description: %s", byName["do_purge_valve"].Description)
	}
	if d := byName["do_fan_speed"].Annotations.DestructiveHint; d == nil || *d {
		t.Error("do_fan_speed (compensable) is marked destructive")
	}
	var speed, mode map[string]any
	json.Unmarshal(byName["do_fan_speed"].RawInputSchema, &speed)
	json.Unmarshal(byName["do_mode"].RawInputSchema, &mode)
	value := speed["properties"].(map[string]any)["value"].(map[string]any)
	if value["type"] != "integer" || value["minimum"] != 0.0 || value["maximum"] != 100.0 {
		t.Errorf("do_fan_speed value schema: %v", value)
	}
	if enum := mode["properties"].(map[string]any)["value"].(map[string]any)["enum"]; !jsonEqual(enum, []any{"off", "eco", "comfort"}) {
		t.Errorf("do_mode enum: %v", enum)
	}
	if len(tools) != 4 || tools[3].Name != "can_do" {
		t.Errorf("tools: %d, last %s", len(tools), tools[len(tools)-1].Name)
	}
}
