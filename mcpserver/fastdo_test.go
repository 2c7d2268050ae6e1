//go:build !lite

package mcpserver_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/mcpserver"
)

// do_* takes the fast path too, in sessions whose client cannot be asked for
// a person's approval (fastread.go, setTools): it must answer as mcp-go does,
// successes, refusals and argument errors alike, and audit the same lines.

// auditLines records an engine's audit entries as JSON, less the time a
// call took and the keys made up for calls without one.
type auditLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *auditLines) add(e engine.AuditEntry) {
	e.DurationMs = 0
	b, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, newKeys.ReplaceAllString(string(b), "KEY"))
}

func (l *auditLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// fastDoSteps are do_* calls the fast path answers, each audited once.
var fastDoSteps = []fastStep{
	{name: "a write", body: callBody("1", `{"name":"do_inflow","arguments":{"value":12.5,"idempotency_key":"d1"}}`)},
	{name: "its key again", body: callBody("2", `{"name":"do_inflow","arguments":{"value":12.5,"idempotency_key":"d1"}}`)},
	{name: "its key with another value", body: callBody("3", `{"name":"do_inflow","arguments":{"value":13,"idempotency_key":"d1"}}`)},
	{name: "a value the register rounds", body: callBody("4", `{"name":"do_inflow","arguments":{"value":12.34,"idempotency_key":"d4"}}`)},
	{name: "out of range", body: callBody("5", `{"name":"do_inflow","arguments":{"value":99,"idempotency_key":"d5"}}`)},
	{name: "a string value", body: callBody("6", `{"name":"do_inflow","arguments":{"value":"x","idempotency_key":"d6"}}`)},
	{name: "no value", body: callBody("7", `{"name":"do_inflow","arguments":{"idempotency_key":"d7"}}`)},
	{name: "a key that is not a string", body: callBody("8", `{"name":"do_inflow","arguments":{"value":1,"idempotency_key":8}}`)},
	{name: "an unknown argument", body: callBody("9", `{"name":"do_inflow","arguments":{"value":1,"idempotency_key":"d9","extra":true}}`)},
	{name: "arguments not an object", body: callBody("10", `{"name":"do_inflow","arguments":"x"}`)},
	{name: "no arguments", body: callBody("11", `{"name":"do_pump"}`)},
	{name: "a bool", body: callBody("12", `{"name":"do_pump","arguments":{"value":true,"idempotency_key":"d12"}}`)},
	{name: "a number for a bool", body: callBody("13", `{"name":"do_pump","arguments":{"value":1,"idempotency_key":"d13"}}`)},
	{name: "no key", body: callBody(`"s14"`, `{"name":"do_pump","arguments":{"value":false}}`)},
}

// newKeys are the keys the server makes up for calls without one.
var newKeys = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

func sameKeys(a rawAnswer) rawAnswer {
	a.body = newKeys.ReplaceAllString(a.body, "KEY")
	return a
}

func TestFastDoAnswersAsMCPGo(t *testing.T) {
	twins := fastTwins(t, true)
	sessions := [2]string{rawSessionOf(t, twins[0].url), rawSessionOf(t, twins[1].url)}
	steps := append(slices.Clone(fastDoSteps), fastStep{name: "a write after the others", body: callBody("15", `{"name":"do_inflow","arguments":{"value":20,"idempotency_key":"d15"}}`)})
	served := mcpserver.FastReadsServed(twins[0].handler)
	for _, s := range steps {
		var got [2]rawAnswer
		for i, d := range twins {
			got[i] = sameKeys(rawPost(t, http.MethodPost, d.url, sessions[i], nil, s.body))
		}
		if !sameAnswer(got[0], got[1]) || !strings.Contains(got[0].body, `"result"`) {
			t.Errorf("%s: fast path answered\n%v\nmcp-go answered\n%v", s.name, got[0], got[1])
		}
	}
	if n := mcpserver.FastReadsServed(twins[0].handler) - served; n != int64(len(steps)) {
		t.Errorf("the fast path answered %d of the %d do_* calls", n, len(steps))
	}
	sameAudit(t, twins, len(steps))

	// A client that declared elicitation may be asked for approval, which
	// mcp-go turns into a request to it: its do_* calls go to mcp-go.
	asking := [2]string{rawSessionWith(t, twins[0].url, `{"elicitation":{}}`), rawSessionWith(t, twins[1].url, `{"elicitation":{}}`)}
	served = mcpserver.FastReadsServed(twins[0].handler)
	fastStepsAnswer(t, twins, asking, []fastStep{{name: "a write by a client that can be asked", body: callBody("16", `{"name":"do_inflow","arguments":{"value":21,"idempotency_key":"d16"}}`)}})
	if n := mcpserver.FastReadsServed(twins[0].handler) - served; n != 0 {
		t.Errorf("the fast path answered %d do_* calls of a client that can be asked", n)
	}
	sameAudit(t, twins, len(steps)+1)
}

// The stream transport's fast path answers do_* as mcp-go does too, and
// leaves those of a client that can be asked to it.
func TestStreamFastDoAnswersAsMCPGo(t *testing.T) {
	twins := fastTwins(t, false)
	mcpserver.DisableStreamFastReads(twins[1].server)
	for round, capabilities := range []string{`{}`, `{"elicitation":{}}`} {
		var got [2][]string
		for i, d := range twins {
			r := newRawStream(t, d.server)
			r.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":`+capabilities+`,"clientInfo":{"name":"raw","version":"0"}}}`, "0")
			r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, "")
			r.send(`{"jsonrpc":"2.0","id":"w","method":"logging/setLevel","params":{"level":"warning"}}`, `"w"`)
			fast := i == 0
			var served int64
			if fast {
				served = mcpserver.StreamFastReadsServed(d.server)
			}
			for _, s := range fastDoSteps {
				var head struct{ ID json.RawMessage }
				if err := json.Unmarshal([]byte(s.body), &head); err != nil {
					t.Fatal(err)
				}
				r.send(strings.ReplaceAll(s.body, `"idempotency_key":"d`, `"idempotency_key":"`+fmt.Sprint(round)), string(head.ID))
			}
			got[i] = r.end()
			for j := range got[i] {
				got[i][j] = newKeys.ReplaceAllString(got[i][j], "KEY")
			}
			slices.Sort(got[i])
			if !fast {
				continue
			}
			want := int64(len(fastDoSteps))
			if capabilities != `{}` {
				want = 0
			}
			if n := mcpserver.StreamFastReadsServed(d.server) - served; n != want {
				t.Errorf("%s: the fast path answered %d do_* calls, want %d", capabilities, n, want)
			}
		}
		if !slices.Equal(got[0], got[1]) {
			t.Errorf("%s: the fast path answered\n%s\nmcp-go answered\n%s", capabilities, strings.Join(got[0], "\n"), strings.Join(got[1], "\n"))
		}
		if logs := slices.DeleteFunc(slices.Clone(got[0]), func(l string) bool { return !strings.Contains(l, `"notifications/message"`) }); len(logs) == 0 {
			t.Errorf("%s: no log message of a refused call", capabilities)
		}
	}
	sameAudit(t, twins, 2*len(fastDoSteps))
}

// sameAudit checks that both twins audited the same n lines.
func sameAudit(t *testing.T, twins [2]*fastTwin, n int) {
	t.Helper()
	a, b := twins[0].audit.all(), twins[1].audit.all()
	if !slices.Equal(a, b) || len(a) != n {
		t.Errorf("audited with the fast path (%d lines)\n%s\nwithout it (%d lines)\n%s\nwant %d lines each", len(a), strings.Join(a, "\n"), len(b), strings.Join(b, "\n"), n)
	}
}
