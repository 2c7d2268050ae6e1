//go:build !lite

package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/testclock"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
)

// read_* calls answered without mcp-go's request path (fastread.go) must be
// answered exactly as mcp-go answers them. Each test drives two identical
// tanks in lockstep, one with the fast path and one without, on clocks that
// agree, and compares every answer byte for byte.

// fastTwin is one side: a tank served over HTTP.
type fastTwin struct {
	url     string
	server  *server.MCPServer
	handler *mcpserver.HTTPHandler
	clk     *testclock.Clock
	bus     interface{ SetOffline(bool) }
	hanging *hangingBus
	audit   *auditLines
}

// fastTwins serves two tanks as serve does (protect: behind Protect, the
// local role operator), the second with every request going to mcp-go.
func fastTwins(t *testing.T, protect bool) [2]*fastTwin {
	var twins [2]*fastTwin
	for i := range twins {
		m, p := loadDevice(t, tankManifest, tankPolicy)
		clk := testclock.New(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
		d := &fastTwin{clk: clk, audit: &auditLines{}}
		buses, err := drivers.OpenAll(context.Background(), m, nil, sim.NewOpener(sim.Options{Now: clk.Now}), true)
		if err != nil {
			t.Fatal(err)
		}
		d.bus = buses["mb"].(interface{ SetOffline(bool) })
		d.hanging = &hangingBus{ModbusBus: buses["mb"].(drivers.ModbusBus), entered: make(chan struct{}), released: make(chan struct{})}
		buses["mb"] = d.hanging
		e, err := engine.New(m, p, buses, engine.Options{Now: clk.Now, Logger: quietLogger(), Audit: d.audit.add})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		local := engine.Caller{Identity: "local", Role: manifest.RoleOperator}
		s, err := mcpserver.New(e, mcpserver.Options{Version: "test", Logger: quietLogger(), Now: clk.Now, Caller: mcpserver.CallerFrom(local)})
		if err != nil {
			t.Fatal(err)
		}
		d.server, d.handler = s, mcpserver.NewHTTPHandler(s, quietLogger())
		if i == 1 {
			mcpserver.DisableFastReads(d.handler)
		}
		var h http.Handler = d.handler
		if protect {
			h = mcpserver.Protect(h, mcpserver.Access{
				Local:   auth.Principal{Name: "local", Role: manifest.RoleOperator, Method: auth.MethodLocal},
				Permits: mcpserver.RolePermits(e), Logger: quietLogger(),
			})
		}
		ts := httptest.NewServer(h)
		t.Cleanup(ts.Close)
		d.url = ts.URL + mcpserver.EndpointPath
		twins[i] = d
	}
	return twins
}

// rawAnswer is what a client sees of an answer, less the Date header.
type rawAnswer struct {
	status int
	header http.Header
	body   string
}

func (a rawAnswer) String() string {
	return fmt.Sprintf("%d %v\n%s", a.status, a.header, a.body)
}

// rawPost posts body with the headers (Content-Type application/json and
// the legacy session's headers unless headers set them; "" removes one).
func rawPost(t *testing.T, method, url, session string, headers map[string]string, body string) rawAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
	}
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
		} else if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Header.Del("Date")
	return rawAnswer{resp.StatusCode, resp.Header, string(out)}
}

// rawSessionOf opens a legacy session over plain HTTP and returns its id.
func rawSessionOf(t *testing.T, url string) string {
	t.Helper()
	return rawSessionWith(t, url, `{}`)
}

// rawSessionWith is rawSessionOf for a client of these capabilities (JSON).
func rawSessionWith(t *testing.T, url, capabilities string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+
		mcp.LATEST_LEGACY_PROTOCOL_VERSION+`","capabilities":`+capabilities+`,"clientInfo":{"name":"twin","version":"1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	if id == "" {
		t.Fatalf("initialize: %s, no session", resp.Status)
	}
	if a := rawPost(t, http.MethodPost, url, id, nil, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); a.status != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %v", a)
	}
	return id
}

// fastStep is one request, sent to both twins.
type fastStep struct {
	name    string
	method  string // POST unless set
	headers map[string]string
	body    string
}

func callBody(id, params string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":` + params + `}`
}

// The requests a fast path must answer as mcp-go does, or leave to it.
var fastSteps = []fastStep{
	{name: "uncached read", body: callBody("1", `{"name":"read_level"}`)},
	{name: "cached read", body: callBody("2", `{"name":"read_level"}`)},
	{name: "string id", body: callBody(`"abc"`, `{"name":"read_level"}`)},
	{name: "id that JSON escapes", body: callBody(`"a<b>&\u2028c"`, `{"name":"read_level"}`)},
	{name: "fractional id", body: callBody("1.5", `{"name":"read_level"}`)},
	{name: "negative id", body: callBody("-7", `{"name":"read_level"}`)},
	{name: "exponent id", body: callBody("1e2", `{"name":"read_level"}`)},
	{name: "id past 2^53", body: callBody("9007199254740993", `{"name":"read_level"}`)},
	{name: "empty arguments", body: callBody("3", `{"name":"read_level","arguments":{}}`)},
	{name: "null arguments", body: callBody("4", `{"name":"read_level","arguments":null}`)},
	{name: "an argument", body: callBody("5", `{"name":"read_level","arguments":{"x":1}}`)},
	{name: "string arguments", body: callBody("6", `{"name":"read_level","arguments":"x"}`)},
	{name: "array arguments", body: callBody("7", `{"name":"read_level","arguments":[1]}`)},
	{name: "unknown tool", body: callBody("8", `{"name":"read_nothing"}`)},
	{name: "tool the role may not call", body: callBody("9", `{"name":"read_pressure"}`)},
	{name: "do_*", body: callBody("10", `{"name":"do_pump","arguments":{"value":false,"idempotency_key":"k10"}}`)},
	{name: "truncated JSON", body: callBody("12", `{"name":"read_level"`)},
	{name: "not JSON", body: `tools/call`},
	{name: "batch", body: `[` + callBody("13", `{"name":"read_level"}`) + `,` + callBody("14", `{"name":"read_level"}`) + `]`},
	{name: "JSON-RPC 1.0", body: `{"jsonrpc":"1.0","id":15,"method":"tools/call","params":{"name":"read_level"}}`},
	{name: "keys in capitals", body: `{"JSONRPC":"2.0","ID":16,"METHOD":"tools/call","PARAMS":{"NAME":"read_level"}}`},
	{name: "name twice", body: callBody("17", `{"name":"read_nothing","name":"read_level"}`)},
	{name: "method twice", body: `{"jsonrpc":"2.0","id":18,"method":"tools/call","method":"tools/list","params":{"name":"read_level"}}`},
	{name: "with a result", body: `{"jsonrpc":"2.0","id":19,"method":"tools/call","params":{"name":"read_level"},"result":{}}`},
	{name: "with a null result", body: `{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"read_level"},"result":null}`},
	{name: "null id", body: callBody("null", `{"name":"read_level"}`)},
	{name: "boolean id", body: callBody("true", `{"name":"read_level"}`)},
	{name: "object id", body: callBody(`{"a":1}`, `{"name":"read_level"}`)},
	{name: "progress token", body: callBody("21", `{"name":"read_level","_meta":{"progressToken":"p"}}`)},
	{name: "task", body: callBody("22", `{"name":"read_level","task":{}}`)},
	{name: "unknown params key", body: callBody("23", `{"name":"read_level","extra":true}`)},
	{name: "unknown top-level key", body: `{"jsonrpc":"2.0","id":24,"method":"tools/call","params":{"name":"read_level"},"extra":[1]}`},
	{name: "escaped method", body: `{"jsonrpc":"2.0","id":25,"method":"tools\/call","params":{"name":"read_level"}}`},
	{name: "notification", body: `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"read_level"}}`},
	{name: "charset", headers: map[string]string{"Content-Type": "application/json; charset=utf-8"}, body: callBody("26", `{"name":"read_level"}`)},
	{name: "text/plain", headers: map[string]string{"Content-Type": "text/plain"}, body: callBody("27", `{"name":"read_level"}`)},
	{name: "JSON only accepted", headers: map[string]string{"Accept": "application/json"}, body: callBody("28", `{"name":"read_level"}`)},
	{name: "no protocol version header", headers: map[string]string{"Mcp-Protocol-Version": ""}, body: callBody("29", `{"name":"read_level"}`)},
	{name: "protocol 2025-03-26", headers: map[string]string{"Mcp-Protocol-Version": "2025-03-26"}, body: callBody("30", `{"name":"read_level"}`)},
	{name: "unknown protocol", headers: map[string]string{"Mcp-Protocol-Version": "2099-01-01"}, body: callBody("31", `{"name":"read_level"}`)},
	{name: "protocol 2026-07-28", headers: map[string]string{"Mcp-Protocol-Version": "2026-07-28"}, body: callBody("32", `{"name":"read_level"}`)},
	{name: "foreign Host", headers: map[string]string{"Host": "device.example"}, body: callBody("33", `{"name":"read_level"}`)},
	{name: "unknown session", headers: map[string]string{"Mcp-Session-Id": "mcp-session-nothing"}, body: callBody("34", `{"name":"read_level"}`)},
	{name: "no session", headers: map[string]string{"Mcp-Session-Id": ""}, body: callBody("35", `{"name":"read_level"}`)},
	{name: "GET", method: http.MethodGet, headers: map[string]string{"Accept": "text/event-stream"}},
	{name: "PUT", method: http.MethodPut, body: callBody("36", `{"name":"read_level"}`)},
	// mcp-go tells the era from params._meta merged over every params key,
	// the CallToolRequest from the last params alone.
	{name: "params twice, the first of the 2026-07-28 era", body: `{"jsonrpc":"2.0","id":37,"method":"tools/call",` +
		`"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}},"params":{"name":"do_inflow","arguments":{"value":3,"idempotency_key":"k37"}}}`},
	{name: "params twice, _META in the first", body: `{"jsonrpc":"2.0","id":38,"method":"tools/call",` +
		`"params":{"_META":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}},"params":{"name":"read_level"}}`},
	{name: "params twice, _meta escaped in the first", body: `{"jsonrpc":"2.0","id":39,"method":"tools/call",` +
		`"params":{"\u005fmeta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}},"params":{"name":"read_level"}}`},
}

// fastStepsAnswer sends steps to both twins in their sessions, compares
// the answers and returns the last.
func fastStepsAnswer(t *testing.T, twins [2]*fastTwin, sessions [2]string, steps []fastStep) (last rawAnswer) {
	t.Helper()
	for _, s := range steps {
		method := cmpOr(s.method, http.MethodPost)
		if method == http.MethodGet {
			continue // a GET stream does not end; TestResourceSubscription has reads beside one
		}
		var got [2]rawAnswer
		for i, d := range twins {
			got[i] = rawPost(t, method, d.url, sessions[i], s.headers, s.body)
		}
		if !sameAnswer(got[0], got[1]) {
			t.Errorf("%s: fast path answered\n%v\nmcp-go answered\n%v", s.name, got[0], got[1])
		}
		last = got[0]
	}
	return last
}

// sameAnswer compares two answers byte for byte, except that of two SSE
// answers one may lack notifications the other has: mcp-go v1.2.1 drops a
// notification its forwarder takes off the channel as the call ends
// (docs/interop.md, "Known trap"). The fast path writes every one it is
// handed; the tests check those against what they expect.
func sameAnswer(a, b rawAnswer) bool {
	if a.String() == b.String() {
		return true
	}
	if a.status != b.status || fmt.Sprint(a.header) != fmt.Sprint(b.header) || a.header.Get("Content-Type") != "text/event-stream" {
		return false
	}
	ea, eb := sseEvents(a.body), sseEvents(b.body)
	if len(ea) == 0 || len(eb) == 0 || ea[len(ea)-1] != eb[len(eb)-1] {
		return false
	}
	na, nb := ea[:len(ea)-1], eb[:len(eb)-1]
	return subsequence(na, nb) || subsequence(nb, na)
}

func sseEvents(body string) []string {
	return strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n")
}

// subsequence says whether a is b with some elements left out.
func subsequence(a, b []string) bool {
	for _, x := range b {
		if len(a) > 0 && a[0] == x {
			a = a[1:]
		}
	}
	return len(a) == 0
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func TestFastReadsAnswerAsMCPGo(t *testing.T) {
	for _, protect := range []bool{true, false} {
		t.Run(fmt.Sprintf("protect=%v", protect), func(t *testing.T) {
			twins := fastTwins(t, protect)
			sessions := [2]string{rawSessionOf(t, twins[0].url), rawSessionOf(t, twins[1].url)}
			fastStepsAnswer(t, twins, sessions, fastSteps)
			if n := mcpserver.FastReadsServed(twins[0].handler); n < 10 {
				t.Errorf("the fast path answered %d calls", n)
			}
			if n := mcpserver.FastReadsServed(twins[1].handler); n != 0 {
				t.Errorf("the fast path answered %d calls with it off", n)
			}

			// A session that asked for warnings is told of a refused do_*
			// (on that call's answer as SSE); from then on mcp-go answers
			// the session's calls as SSE, reads included.
			for i, d := range twins {
				if a := rawPost(t, http.MethodPost, d.url, sessions[i], nil,
					`{"jsonrpc":"2.0","id":40,"method":"logging/setLevel","params":{"level":"warning"}}`); a.status != http.StatusOK {
					t.Fatalf("logging/setLevel: %v", a)
				}
			}
			served := mcpserver.FastReadsServed(twins[0].handler)
			refused := fastStep{name: "refused do_* with warnings on", body: callBody("41", `{"name":"do_inflow","arguments":{"value":99,"idempotency_key":"k41"}}`)}
			if a := fastStepsAnswer(t, twins, sessions, []fastStep{refused}); !strings.HasPrefix(a.body, "event: message\n") || !strings.Contains(a.body, "notifications/message") {
				t.Errorf("the refused do_* was not answered with its log message: %v", a)
			}
			if n := mcpserver.FastReadsServed(twins[0].handler); n != served+1 {
				t.Errorf("the fast path answered %d of the refused do_* calls", n-served)
			}
			served++
			if a := rawPost(t, http.MethodPost, twins[0].url, sessions[0], nil, callBody("42", `{"name":"read_level"}`)); !strings.HasPrefix(a.body, "event: message\n") {
				t.Errorf("a read after a log message was not answered as SSE: %v", a)
			}
			_ = rawPost(t, http.MethodPost, twins[1].url, sessions[1], nil, callBody("42", `{"name":"read_level"}`))
			fastStepsAnswer(t, twins, sessions, fastSteps[:12])
			if n := mcpserver.FastReadsServed(twins[0].handler); n != served {
				t.Errorf("the fast path answered %d calls of a session mcp-go answers as SSE", n-served)
			}

			// A session that ended is not found.
			for i, d := range twins {
				if a := rawPost(t, http.MethodDelete, d.url, sessions[i], nil, ""); a.status != http.StatusOK {
					t.Fatalf("DELETE: %v", a)
				}
			}
			fastStepsAnswer(t, twins, sessions, fastSteps[:2])
		})
	}
}

// A device that stops answering is told to the sessions that asked (a
// breaker that opens: to every session), on the answer of the read that
// found it when that read is the session's own, and mcp-go answers the
// sessions as SSE from then on.
func TestFastReadsDeviceEvents(t *testing.T) {
	twins := fastTwins(t, true)
	var quiet, notice [2]string // sessions at mcp-go's default level (error), and at notice
	for i, d := range twins {
		quiet[i], notice[i] = rawSessionOf(t, d.url), rawSessionOf(t, d.url)
		if a := rawPost(t, http.MethodPost, d.url, notice[i], nil, `{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"notice"}}`); a.status != http.StatusOK {
			t.Fatalf("logging/setLevel: %v", a)
		}
	}
	read := fastStep{name: "read", body: callBody("2", `{"name":"read_level"}`)}
	steps := func(name string, sessions [2]string, events ...string) {
		t.Helper()
		for _, d := range twins {
			d.clk.Advance(200 * time.Millisecond) // past read_level's cache TTL
		}
		read.name = name
		served := mcpserver.FastReadsServed(twins[0].handler)
		a := fastStepsAnswer(t, twins, sessions, []fastStep{read})
		fast := mcpserver.FastReadsServed(twins[0].handler) > served
		var got []string
		for _, line := range strings.Split(a.body, "\n") {
			if data, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(data, `"notifications/message"`) {
				var n struct {
					Params struct{ Data struct{ Event string } }
				}
				if err := json.Unmarshal([]byte(data), &n); err != nil {
					t.Fatal(err)
				}
				got = append(got, n.Params.Data.Event)
			}
		}
		// The fast path's answer has them all; mcp-go's may lack some.
		if sse := strings.HasPrefix(a.body, "event: message\n"); !slices.Equal(got, events) && (fast || !subsequence(got, events)) ||
			sse != (len(events) > 0 || strings.Contains(name, "SSE")) {
			t.Errorf("%s: log messages %v, want %v, in\n%v", name, got, events, a)
		}
	}
	steps("a read before", quiet)
	for _, d := range twins {
		d.bus.SetOffline(true)
	}
	for i := range engine.BreakerThreshold - 1 {
		steps(fmt.Sprintf("failed read %d", i+1), quiet)
	}
	steps("the failed read that opens the breaker", quiet, "device_breaker_open")
	steps("a read with the breaker open, SSE", quiet)
	steps("a read of the session that asked for notices", notice, "device_unreachable", "device_breaker_open")
	for _, d := range twins {
		d.bus.SetOffline(false)
		d.clk.Advance(engine.BreakerCooloff)
	}
	steps("the read that finds the device back, SSE", quiet)
	steps("and the other session's", notice, "device_reachable")
	if n := mcpserver.FastReadsServed(twins[0].handler); n != 1+engine.BreakerThreshold {
		t.Errorf("the fast path answered %d reads, want the %d before the breaker opened", n, 1+engine.BreakerThreshold)
	}
}

// mcp-go's client sees the same results, errors and log messages from both.
func TestFastReadsMCPGoClient(t *testing.T) {
	twins := fastTwins(t, true)
	var clients [2]*client.Client
	var mu sync.Mutex
	var logs [2][]string
	for i, d := range twins {
		tr, err := transport.NewStreamableHTTP(d.url)
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = client.NewClient(tr, client.WithLegacyProtocolOnly())
		start(t, clients[i])
		clients[i].OnNotification(func(n mcp.JSONRPCNotification) {
			if event, ok := n.Params.AdditionalFields["data"].(map[string]any)["event"].(string); ok {
				mu.Lock()
				logs[i] = append(logs[i], event)
				mu.Unlock()
			}
		})
		setLevel(t, clients[i], mcp.LoggingLevelNotice)
	}
	calls := []struct {
		tool string
		args any
	}{
		{"read_level", nil}, {"read_level", map[string]any{}}, {"read_level", map[string]any{"x": 1}}, {"read_level", "x"},
		{"read_nothing", nil}, {"read_pressure", nil}, {"read_level", nil},
	}
	call := func(i int, tool string, args any) string {
		res, err := clients[i].CallTool(context.Background(), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: tool, Arguments: args}})
		raw, _ := json.Marshal(res)
		return fmt.Sprintf("%s %v", raw, err)
	}
	for _, c := range calls {
		if a, b := call(0, c.tool, c.args), call(1, c.tool, c.args); a != b {
			t.Errorf("%s %v: fast path %s, mcp-go %s", c.tool, c.args, a, b)
		}
	}
	served := mcpserver.FastReadsServed(twins[0].handler)
	if served < 5 {
		t.Errorf("the fast path answered %d calls", served)
	}
	// A device failing: its log messages come with the reads' answers.
	for _, d := range twins {
		d.bus.SetOffline(true)
	}
	for range engine.BreakerThreshold {
		for i, d := range twins {
			d.clk.Advance(200 * time.Millisecond)
			_ = call(i, "read_level", nil)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The first comes with the fast path's answer; mcp-go may drop either
	// (docs/interop.md, "Known trap").
	want := []string{"device_unreachable", "device_breaker_open"}
	if len(logs[0]) == 0 || logs[0][0] != want[0] || !subsequence(logs[0], want) || !subsequence(logs[1], want) {
		t.Errorf("log messages: fast path %v, mcp-go %v; want %v", logs[0], logs[1], want)
	}
	if n := mcpserver.FastReadsServed(twins[0].handler); n != served+1 {
		t.Errorf("the fast path answered %d of the failing reads, want the first (before the session had a log message)", n-served)
	}
}

// hangingBus holds reads of the Modbus bus while hang is set, until
// released.
type hangingBus struct {
	drivers.ModbusBus
	hang     atomic.Bool
	entered  chan struct{}
	released chan struct{}
}

func (b *hangingBus) ReadRegisters(ctx context.Context, unit uint8, table manifest.ModbusTable, addr, count uint16) ([]uint16, error) {
	if b.hang.Load() {
		b.entered <- struct{}{}
		<-b.released
	}
	return b.ModbusBus.ReadRegisters(ctx, unit, table, addr, count)
}

// notifications/cancelled ends a call on either path as mcp-go ends its
// own: the transaction a read started finishes (engine.measure), a second
// read waiting for it returns at once.
func TestFastReadsCancelled(t *testing.T) {
	twins := fastTwins(t, true)
	var got [2][2]rawAnswer // per twin: the waiting read, the first
	for i, d := range twins {
		session := rawSessionOf(t, d.url)
		d.hanging.hang.Store(true)
		var answers [2]chan rawAnswer
		for k, id := range []string{`"r1"`, `"r2"`} {
			answers[k] = make(chan rawAnswer, 1)
			go func() {
				answers[k] <- rawPost(t, http.MethodPost, d.url, session, nil, callBody(id, `{"name":"read_level"}`))
			}()
			if k == 0 {
				<-d.hanging.entered
			}
		}
		// r2 is cancelled once it waits for r1's transaction.
		deadline := time.After(5 * time.Second)
	cancelling:
		for {
			if a := rawPost(t, http.MethodPost, d.url, session, nil,
				`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"r2","reason":"test"}}`); a.status != http.StatusAccepted {
				t.Fatalf("notifications/cancelled: %v", a)
			}
			select {
			case got[i][0] = <-answers[1]:
				break cancelling
			case <-time.After(20 * time.Millisecond):
			case <-deadline:
				close(d.hanging.released)
				t.Fatal("a read went on waiting after notifications/cancelled")
			}
		}
		close(d.hanging.released)
		got[i][1] = <-answers[0]
	}
	for k, what := range []string{"the cancelled read", "the read whose transaction it waited for"} {
		if !sameAnswer(got[0][k], got[1][k]) {
			t.Errorf("%s: fast path answered\n%v\nmcp-go answered\n%v", what, got[0][k], got[1][k])
		}
	}
	if n := mcpserver.FastReadsServed(twins[0].handler); n != 2 {
		t.Errorf("the fast path answered %d reads, want both", n)
	}
}

// Concurrent reads of several sessions while the device fails and comes
// back, and sessions end: every answer is a whole one (run with -race).
func TestFastReadsConcurrent(t *testing.T) {
	d := fastTwins(t, true)[0]
	var wg sync.WaitGroup
	for range 4 {
		session := rawSessionOf(t, d.url)
		for k := range 4 {
			wg.Go(func() {
				for i := range 25 {
					a := rawPost(t, http.MethodPost, d.url, session, nil, callBody(fmt.Sprint(i), `{"name":"read_level"}`))
					if a.status == http.StatusNotFound {
						return // the session ended (its fourth reader ends it)
					}
					if a.status != http.StatusOK || !strings.Contains(a.body, `"id":`+fmt.Sprint(i)+`,"result"`) {
						t.Errorf("read %d: %v", i, a)
						return
					}
				}
				if k == 3 {
					_ = rawPost(t, http.MethodDelete, d.url, session, nil, "")
				}
			})
		}
	}
	wg.Go(func() {
		for i := range 20 {
			d.bus.SetOffline(i%2 == 0)
			d.clk.Advance(engine.BreakerCooloff)
			time.Sleep(2 * time.Millisecond)
		}
	})
	wg.Wait()
	if mcpserver.FastReadsServed(d.handler) == 0 {
		t.Error("the fast path answered none")
	}
}

// A read_* tool mcp-go no longer holds, or holds with another handler, is
// answered as mcp-go answers it.
func TestFastReadsFollowMCPGoTools(t *testing.T) {
	twins := fastTwins(t, false)
	sessions := [2]string{rawSessionOf(t, twins[0].url), rawSessionOf(t, twins[1].url)}
	for _, d := range twins {
		d.server.DeleteTools("read_pressure")
		d.server.AddTool(mcp.NewTool("read_level", mcp.WithDescription("replaced")), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("replaced"), nil
		})
	}
	fastStepsAnswer(t, twins, sessions, []fastStep{{name: "removed tool", body: callBody("1", `{"name":"read_pressure"}`)}})
	served := mcpserver.FastReadsServed(twins[0].handler)
	a := fastStepsAnswer(t, twins, sessions, []fastStep{{name: "replaced tool", body: callBody("2", `{"name":"read_level"}`)}})
	if !strings.Contains(a.body, `"text":"replaced"`) || mcpserver.FastReadsServed(twins[0].handler) != served+1 {
		t.Errorf("the fast path did not run the handler mcp-go holds: %v", a)
	}
}

// timestamps are the adopted readings', which come from the real clock.
var timestamps = regexp.MustCompile(`\d{4}-\d\d-\d\dT[0-9:.]+Z`)

// An aggregator whose tools change tells every session (mcp-go's
// notifications/tools/list_changed), which has mcp-go answer them as SSE
// from then on, though the session's GET stream took the notification.
func TestFastReadsAfterToolsChange(t *testing.T) {
	pump, irrigation := siteSource(t, "pump"), siteSource(t, "irrigation")
	var twins [2]*fastTwin
	var sessions [2]string
	for i := range twins {
		m, p := loadDeviceFiles(t, "../examples/site/aggregator")
		m.Buses, m.Capabilities = nil, nil // adopted below
		e := simEngine(t, m, p, nil)
		opts := groupOptions(e, "plant_room")
		opts.ToolsChange = true
		adoptInto(t, e, "pump", pump, "plant_room")
		s, err := mcpserver.New(e, opts)
		if err != nil {
			t.Fatal(err)
		}
		d := &fastTwin{server: s, handler: mcpserver.NewHTTPHandler(s, quietLogger())}
		if i == 1 {
			mcpserver.DisableFastReads(d.handler)
		}
		ts := httptest.NewServer(d.handler)
		t.Cleanup(ts.Close)
		t.Cleanup(func() { d.handler.CloseSessions(context.Background()) })
		d.url = ts.URL + mcpserver.EndpointPath
		twins[i], sessions[i] = d, rawSessionOf(t, d.url)
		// The session's GET stream, which takes the notification.
		req, err := http.NewRequest(http.MethodGet, d.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", sessions[i])
		req.Header.Set("Mcp-Protocol-Version", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
		stream, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stream.Body.Close() })
		changed := make(chan struct{})
		go func() {
			lines := bufio.NewScanner(stream.Body)
			for lines.Scan() {
				if strings.Contains(lines.Text(), "notifications/tools/list_changed") {
					close(changed)
					return
				}
			}
		}()
		read := fastStep{name: "a read before", body: callBody("1", `{"name":"read_circulation_pump_speed"}`)}
		if a := rawPost(t, http.MethodPost, d.url, sessions[i], nil, read.body); a.status != http.StatusOK || !strings.Contains(a.body, `"result"`) {
			t.Fatalf("%s: %v", read.name, a)
		}
		adoptInto(t, e, "irrigation", irrigation, "plant_room")
		select {
		case <-changed:
		case <-time.After(5 * time.Second):
			t.Fatal("no notifications/tools/list_changed on the GET stream")
		}
	}
	served := mcpserver.FastReadsServed(twins[0].handler)
	var got [2]rawAnswer
	for i, d := range twins {
		got[i] = rawPost(t, http.MethodPost, d.url, sessions[i], nil, callBody("2", `{"name":"read_circulation_pump_speed"}`))
		got[i].body = timestamps.ReplaceAllString(got[i].body, "TIME")
	}
	if !sameAnswer(got[0], got[1]) || !strings.HasPrefix(got[0].body, "event: message\n") || mcpserver.FastReadsServed(twins[0].handler) != served {
		t.Errorf("a read after the change: fast path answered\n%v\nmcp-go answered\n%v", got[0], got[1])
	}
}
