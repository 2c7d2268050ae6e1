package lint

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Session is a connection to a running MCP server.
type Session interface {
	ListTools(ctx context.Context) ([]Tool, error)
	// CallTool returns the call's JSON body (structuredContent, or the JSON in
	// its text content; nil when there is neither). err is a protocol or
	// transport error, not a tool result with isError.
	CallTool(ctx context.Context, name string, args map[string]any) (body any, isError bool, err error)
	Close() error
}

// Live calls every read_* and the can_do of a running server, which never
// act, and checks their answers against the proMCP contracts and the tools'
// own output schemas. It never calls a do_* tool.
func Live(ctx context.Context, s Session, tools []Tool) (findings []Finding, notes []string) {
	l := &live{s: s, served: map[string]Tool{}, schemas: map[string]*jsonschema.Schema{}}
	for _, t := range tools {
		l.served[t.Name] = t
	}
	for _, t := range tools {
		if KindOf(t.Name) == KindRead {
			l.read(ctx, t)
		}
	}
	if canDo, ok := l.served["can_do"]; ok {
		l.canDo(ctx, canDo, tools)
	}
	return l.findings, l.notes
}

type live struct {
	s      Session
	served map[string]Tool
	// schemas holds each output schema compiled once (can_do is called many
	// times, and compiling costs ~200 times a validation); nil when it does not compile.
	schemas  map[string]*jsonschema.Schema
	findings []Finding
	notes    []string
}

func (l *live) add(f Finding) { l.findings = append(l.findings, f) }
func (l *live) note(format string, args ...any) {
	l.notes = append(l.notes, fmt.Sprintf(format, args...))
}

// call makes one call and checks the body against the tool's output schema.
// ok is false when there is no body to check further.
func (l *live) call(ctx context.Context, t Tool, args map[string]any, what string) (map[string]any, bool, bool) {
	body, isError, err := l.s.CallTool(ctx, t.Name, args)
	if err != nil {
		l.add(finding("live-call", t.Name, "%s: the call failed: %v", what, err))
		return nil, false, false
	}
	obj, ok := body.(map[string]any)
	if !ok {
		l.add(finding("live-call", t.Name, "%s: the answer has no JSON object (structuredContent or JSON text)", what))
		return nil, isError, false
	}
	if s := l.outputSchema(t); s != nil {
		if err := s.Validate(obj); err != nil {
			l.add(finding("live-output-schema", t.Name, "%s: the answer does not match the tool's outputSchema: %v", what, err))
		}
	}
	return obj, isError, true
}

// outputSchema is t's compiled output schema, or nil (noted once) when it
// has none or it does not compile.
func (l *live) outputSchema(t Tool) *jsonschema.Schema {
	if s, done := l.schemas[t.Name]; done || t.OutputSchema == nil {
		return s
	}
	s, err := compileSchema(t.OutputSchema)
	if err != nil {
		l.note("%s: output schema not checked live (%v)", t.Name, err)
	}
	l.schemas[t.Name] = s
	return s
}

// compileSchema compiles a server's schema with formats asserted. A $ref is
// resolved only inside the schema: the linter never reads a file or URL a
// server names.
func compileSchema(schema map[string]any) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	const url = "mem:///outputSchema.json"
	if err := c.AddResource(url, schema); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

func (l *live) read(ctx context.Context, t Tool) {
	if req, _ := t.InputSchema["required"].([]any); len(req) > 0 {
		l.note("%s: not called (it requires arguments)", t.Name)
		return
	}
	body, isError, ok := l.call(ctx, t, map[string]any{}, "read")
	if !ok {
		return
	}
	bad := func(format string, args ...any) { l.add(finding("live-read-contract", t.Name, format, args...)) }
	if missing := missingKeys(body, "value", "unit", "timestamp", "quality"); len(missing) > 0 {
		bad("the answer lacks %s", strings.Join(missing, ", "))
	}
	quality, _ := body["quality"].(string)
	if _, present := body["quality"]; present && !slices.Contains([]string{"good", "stale", "degraded", "error"}, quality) {
		bad("quality %v is not good, stale, degraded or error", body["quality"])
	}
	if u, present := body["unit"]; present {
		if _, isString := u.(string); !isString && u != nil {
			bad("unit must be a string or null, not %v", u)
		}
	}
	if ts, present := body["timestamp"]; present {
		if err := utcTimestamp(ts); err != nil {
			bad("timestamp: %v", err)
		}
	}
	if _, present := body["side_effects"]; present {
		bad("a read answer declares side_effects")
	}
	switch {
	case isError && quality == "good":
		bad("isError is set on an answer of quality good")
	case quality != "" && quality != "good":
		l.note("%s: reads %s right now (%v)", t.Name, quality, body["detail"])
	}
}

// intent is one can_do query and what its answer must show.
type intent struct {
	what     string
	args     map[string]any
	expect   string // a do_* tool the answer should route to
	mustFail bool   // nothing can match: feasible must be false
}

func (l *live) canDo(ctx context.Context, canDo Tool, tools []Tool) {
	var intents []intent
	for _, t := range tools {
		if KindOf(t.Name) != KindDo {
			continue
		}
		subject := strings.TrimPrefix(t.Name, "do_")
		intents = append(intents, intent{
			what:   "intent for " + t.Name,
			args:   map[string]any{"intent": map[string]any{"semantic_tags": toAny(strings.Split(subject, "_")), "action": "set", "target": subject}},
			expect: t.Name,
		})
	}
	for _, t := range tools {
		if KindOf(t.Name) == KindRead {
			subject := strings.TrimPrefix(t.Name, "read_")
			intents = append(intents, intent{what: "read intent for " + t.Name,
				args: map[string]any{"intent": map[string]any{"semantic_tags": toAny(strings.Split(subject, "_")), "action": "read"}}})
			break
		}
	}
	intents = append(intents,
		intent{what: "intent that matches nothing", mustFail: true,
			args: map[string]any{"intent": map[string]any{"semantic_tags": []any{"promcp_lint_matches_nothing"}, "action": "toggle"}}},
		intent{what: "malformed intent (no semantic_tags)", mustFail: true,
			args: map[string]any{"intent": map[string]any{"semantic_tags": []any{}}}},
	)
	for _, in := range intents {
		body, isError, ok := l.call(ctx, canDo, in.args, in.what)
		if !ok {
			continue
		}
		if isError && in.mustFail {
			continue // refusing a hopeless intent as a tool error is fine
		}
		l.report(in, body)
	}
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// report checks one CapabilityReport.
func (l *live) report(in intent, r map[string]any) {
	bad := func(format string, args ...any) {
		l.add(finding("live-cando-contract", "can_do", in.what+": "+format, args...))
	}
	foreign := func(format string, args ...any) {
		l.add(finding("live-cando-foreign", "can_do", in.what+": "+format, args...))
	}
	if missing := missingKeys(r, "query_id", "feasible", "candidates", "blocked", "context", "metadata"); len(missing) > 0 {
		bad("the report lacks %s", strings.Join(missing, ", "))
	}
	if id, _ := r["query_id"].(string); !uuidV4.MatchString(id) {
		bad("query_id %v is not a UUIDv4", r["query_id"])
	}
	feasible, isBool := r["feasible"].(bool)
	if !isBool {
		bad("feasible must be a boolean")
	}
	var reportTime time.Time
	if m, ok := r["metadata"].(map[string]any); ok {
		if err := utcTimestamp(m["timestamp"]); err != nil {
			bad("metadata.timestamp: %v", err)
		} else {
			reportTime, _ = time.Parse(time.RFC3339Nano, m["timestamp"].(string))
		}
	}

	allowed, routed := false, map[string]bool{}
	candidates := objects(r["candidates"])
	for i, c := range candidates {
		at := fmt.Sprintf("candidates[%d]", i)
		name, _ := c["capability"].(string)
		routed[name] = true
		if !l.serves(name) {
			foreign("%s names %q, which this server does not serve", at, name)
		}
		perm, _ := c["permission"].(string)
		if !validPermission(perm) {
			bad("%s.permission %q is not a proMCP permission", at, perm)
		}
		allowed = allowed || perm == "allowed"
		if conf, ok := c["confidence"].(float64); !ok || conf < 0 || conf > 1 {
			bad("%s.confidence %v is not a number from 0 to 1", at, c["confidence"])
		}
		if err := utcTimestamp(c["valid_until"]); err != nil {
			bad("%s.valid_until: %v (a candidate without it is worth nothing)", at, err)
		} else if until, _ := time.Parse(time.RFC3339Nano, c["valid_until"].(string)); !reportTime.IsZero() && until.Before(reportTime) {
			bad("%s.valid_until %s is before the report's own timestamp", at, c["valid_until"])
		}
	}
	blocked := objects(r["blocked"])
	for i, b := range blocked {
		at := fmt.Sprintf("blocked[%d]", i)
		name, _ := b["capability"].(string)
		routed[name] = true
		if !l.serves(name) {
			foreign("%s names %q, which this server does not serve", at, name)
		}
		if perm, _ := b["permission"].(string); !validPermission(perm) {
			bad("%s.permission %q is not a proMCP permission", at, perm)
		}
		if reason, _ := b["reason"].(string); strings.TrimSpace(reason) == "" {
			bad("%s has no reason", at)
		}
	}
	unroutable := objects(r["unroutable"])
	for i, u := range unroutable {
		if u["outcome"] != "unroutable" {
			bad("unroutable[%d].outcome is %v, want unroutable", i, u["outcome"])
		}
		if reason, _ := u["reason"].(string); !slices.Contains([]string{"no_producer", "requirements_unmet", "malformed_request"}, reason) {
			bad("unroutable[%d].reason %q is not no_producer, requirements_unmet or malformed_request", i, reason)
		}
	}
	if isBool {
		derived := allowed && len(unroutable) == 0
		switch {
		case feasible != derived:
			bad("feasible is %v but the candidates and unroutable entries say %v (feasible is derived, never asserted)", feasible, derived)
		case !feasible && len(blocked) == 0 && len(unroutable) == 0:
			bad("feasible is false and nothing explains why: no blocked or unroutable entry (a candidate that is not allowed does not; list it under blocked too)")
		case in.mustFail && feasible:
			bad("feasible is true for an intent that cannot match")
		}
	}
	if ctx, ok := r["context"].(map[string]any); ok {
		for _, read := range stringItems(ctx["related_reads"]) {
			if _, ok := l.served[read]; !ok || KindOf(read) != KindRead {
				foreign("context.related_reads names %q, which is not a read_* tool of this server", read)
			}
		}
	}
	if in.expect != "" && !routed[in.expect] && !routed[strings.TrimPrefix(in.expect, "do_")] {
		l.add(finding("live-cando-coverage", "can_do", "%s: the answer names neither %s as a candidate nor as blocked", in.what, in.expect))
	}
}

// serves says whether name is one of the server's tools (or the capability
// behind one of them).
func (l *live) serves(name string) bool {
	for _, n := range []string{name, "do_" + name, "read_" + name} {
		if _, ok := l.served[n]; ok {
			return true
		}
	}
	return false
}

func utcTimestamp(v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("%v is not a string", v)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("%q is not RFC 3339", s)
	}
	if _, offset := t.Zone(); offset != 0 {
		return fmt.Errorf("%q is not UTC", s)
	}
	return nil
}

func objects(v any) []map[string]any {
	list, _ := v.([]any)
	var out []map[string]any
	for _, item := range list {
		if m, ok := item.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func stringItems(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, item := range list {
		if s, ok := item.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
