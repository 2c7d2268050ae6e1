//go:build !lite

package mcpserver_test

import (
	"regexp"
	"testing"

	"github.com/physmcp/physmcpd/mcpserver"
)

// can_do takes the fast path too (its handler, like a read's, sends no
// progress and asks the client nothing): it must answer as mcp-go does,
// except for what differs between any two reports (the query id, the time
// taken, and the latency estimates, which are each engine's own bus
// transactions timed on the wall clock: 1 ms on one twin, 2 on the other
// under load).
func TestFastCanDoAnswersAsMCPGo(t *testing.T) {
	varying := regexp.MustCompile(`(query_id\\?":\\?")[0-9a-f-]{36}|((?:total|estimated)_latency_ms\\?":)\d+`)
	same := func(a rawAnswer) rawAnswer {
		a.body = varying.ReplaceAllString(a.body, "${1}${2}…")
		return a
	}
	twins := fastTwins(t, true)
	sessions := [2]string{rawSessionOf(t, twins[0].url), rawSessionOf(t, twins[1].url)}
	served := mcpserver.FastReadsServed(twins[0].handler)
	for _, s := range []fastStep{
		{name: "a tag every capability has", body: callBody("1", `{"name":"can_do","arguments":{"intent":{"semantic_tags":["tank"]}}}`)},
		{name: "capped", body: callBody("2", `{"name":"can_do","arguments":{"intent":{"semantic_tags":["tank"]},"max_candidates":1}}`)},
		{name: "a change", body: callBody("3", `{"name":"can_do","arguments":{"intent":{"semantic_tags":["water"],"action":"set","target":"pump","value":true}}}`)},
		{name: "nothing matches", body: callBody("4", `{"name":"can_do","arguments":{"intent":{"semantic_tags":["espresso"]}}}`)},
		{name: "malformed", body: callBody("5", `{"name":"can_do","arguments":{"intent":{"semantic_tags":[]}}}`)},
		{name: "not an object", body: callBody("6", `{"name":"can_do","arguments":"x"}`)},
		{name: "mesh hop in _meta", body: callBody("7", `{"name":"can_do","arguments":{"intent":{"semantic_tags":["tank"]}},"_meta":{"physmcp/mesh":{}}}`)},
	} {
		var got [2]rawAnswer
		for i, d := range twins {
			got[i] = same(rawPost(t, "POST", d.url, sessions[i], nil, s.body))
		}
		if !sameAnswer(got[0], got[1]) {
			t.Errorf("%s: fast path answered\n%v\nmcp-go answered\n%v", s.name, got[0], got[1])
		}
	}
	if n := mcpserver.FastReadsServed(twins[0].handler) - served; n != 6 {
		t.Errorf("the fast path answered %d of the 6 can_do calls without _meta", n)
	}
}
