// Package lint checks any MCP server's tools against the proMCP conventions
// (SPEC.md §1): names, descriptions, input schemas, the response schema of
// each verb, the permission enum and tool density; and, against a running
// server, whether the answers of read_* and can_do keep those contracts. It
// knows nothing of physmcpd: it reads tool lists and talks MCP.
package lint

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Severity says whether a finding breaks proMCP (error) or weakens it (warning).
type Severity string

const (
	Error   Severity = "error"
	Warning Severity = "warning"
)

// Finding is one rule broken by one tool (Tool is empty for server-level rules).
// Code is the reference validator's code for the same defect (SeedCodes), so
// reports can be matched against it; empty where the seed defines none.
type Finding struct {
	Rule     string   `json:"rule"`
	Code     string   `json:"code,omitempty"`
	Severity Severity `json:"severity"`
	Tool     string   `json:"tool,omitempty"`
	Message  string   `json:"message"`
}

func (f Finding) String() string {
	tool := f.Tool
	if tool == "" {
		tool = "(server)"
	}
	rule := f.Rule
	if f.Code != "" {
		rule = f.Code + " " + rule
	}
	return fmt.Sprintf("%-7s %-31s %s: %s", f.Severity, rule, tool, f.Message)
}

// SeedCodes are the rule codes the proMCP v0.2.0 text gives its reference
// validator, each with the check of this linter that finds the same defect.
// The seed defines only these two; the linter's other checks have no code.
// Field is the response field whose absence the code names.
var SeedCodes = []struct{ Code, Rule, Field string }{
	{"R006", "do-response", "compensable"},    // do_* responseSchema missing 'compensable'
	{"R010", "cando-response", "valid_until"}, // can_do candidates[] missing 'valid_until'
}

// seedCode is the code of a rule's finding about one missing field, or "".
func seedCode(rule, field string) string {
	for _, c := range SeedCodes {
		if c.Rule == rule && c.Field == field {
			return c.Code
		}
	}
	return ""
}

// Tool is a tool as a linter sees it. OutputSchema is the MCP outputSchema,
// or the reference linter's responseSchema; Annotations is nil when the
// source gives none.
type Tool struct {
	Name         string
	Description  string
	InputSchema  map[string]any
	OutputSchema map[string]any
	Annotations  *Annotations
}

// Annotations are the MCP tool hints the linter checks against the verb.
type Annotations struct {
	ReadOnlyHint *bool `json:"readOnlyHint"`
}

// Kind is a proMCP verb, or "" for a name that is none.
type Kind string

const (
	KindRead  Kind = "read"
	KindDo    Kind = "do"
	KindCanDo Kind = "can_do"
	// KindStart is start_<x>, physmcpd's proposal for proMCP's roadmap v0.3
	// (docs/roadmap.md): a documented extension, not base proMCP v0.2. Its
	// companions read_status_<x> and do_cancel_<x> are base read_* and do_*.
	KindStart Kind = "start"
	// KindStream is stream_<x>, the proposal for the roadmap's v0.4: it
	// subscribes the caller to a reading's resource.
	KindStream Kind = "stream"
)

// KindOf is the verb a tool name declares.
func KindOf(name string) Kind {
	switch {
	case name == "can_do":
		return KindCanDo
	case strings.HasPrefix(name, "read_") && len(name) > len("read_"):
		return KindRead
	case strings.HasPrefix(name, "do_") && len(name) > len("do_"):
		return KindDo
	case strings.HasPrefix(name, "start_") && len(name) > len("start_"):
		return KindStart
	case strings.HasPrefix(name, "stream_") && len(name) > len("stream_"):
		return KindStream
	}
	return ""
}

// Extension says whether a verb is a documented extension rather than base proMCP.
func (k Kind) Extension() bool { return k == KindStart || k == KindStream }

// Options tune the static checks.
type Options struct {
	// StrictBase reports the extension verbs (start_*, stream_*) as names that are not
	// base proMCP v0.2, as the reference validator would.
	StrictBase bool
}

// Report is the result of a lint run.
type Report struct {
	Source   string    `json:"source"`
	Tools    int       `json:"tools"`
	Live     bool      `json:"live"`
	Findings []Finding `json:"findings"`
	// Notes are facts worth showing that break no rule (a sensor that reads
	// error right now, a schema the validator cannot check).
	Notes  []string `json:"notes"`
	Errors int      `json:"errors"`
	// Warnings counts findings of severity warning.
	Warnings int `json:"warnings"`
}

// Add appends findings and updates the counts.
func (r *Report) Add(fs ...Finding) {
	for _, f := range fs {
		r.Findings = append(r.Findings, f)
		if f.Severity == Error {
			r.Errors++
		} else {
			r.Warnings++
		}
	}
}

// Failed says whether the report fails: any error, or under strict any warning.
func (r *Report) Failed(strict bool) bool {
	return r.Errors > 0 || (strict && r.Warnings > 0)
}

// Rule describes one rule for documentation and --rules.
type Rule struct {
	ID       string
	Severity Severity // the usual severity; a few rules warn in milder cases
	Live     bool     // needs a running server
	Summary  string
}

// Rules lists every rule id the linter can report, in the order of docs/lint.md.
var Rules = []Rule{
	{"name-format", Error, false, "name matches ^[a-z][a-z0-9_]*$ and has at most 64 characters"},
	{"name-verb", Error, false, "name is read_<x>, do_<x> or exactly can_do (or the extensions start_<x> and stream_<x>, except under --strict-base)"},
	{"name-generic", Warning, false, "name says what it is about (not read_data, do_update, ...)"},
	{"name-duplicate", Error, false, "no two tools share a name"},
	{"cando-single", Error, false, "exactly one can_do (a server without do_* tools only gets a warning)"},
	{"description-missing", Error, false, "every tool has a description"},
	{"description-short", Warning, false, "a description of at least 20 characters"},
	{"read-description-mutation", Warning, false, "a read_* description does not sound like a mutation"},
	{"input-schema", Error, false, "inputSchema is an object schema"},
	{"schema-portable", Warning, false, "model APIs accept the inputSchema (no top-level anyOf/oneOf/allOf/not, no $ref, no bare boolean schemas); no bare boolean schemas in the outputSchema"},
	{"do-idempotency-key", Error, false, "every do_* input has idempotency_key (a string)"},
	{"cando-intent", Error, false, "can_do input has intent{semantic_tags[]} and only the proMCP actions"},
	{"response-schema-missing", Error, false, "every tool declares its response schema (outputSchema or responseSchema)"},
	{"read-response", Error, false, "read_* response has value, unit, timestamp, quality (good|stale|degraded|error)"},
	{"read-side-effects", Error, false, "a read_* response declares no side effects"},
	{"do-response", Error, false, "do_* response has status, idempotency_key, applied_value, previous_value, side_effects, compensable, compensation_hint, timestamp"},
	{"cando-response", Error, false, "can_do response is a CapabilityReport (candidates with valid_until, blocked, unroutable, context, metadata)"},
	{"permission-enum", Error, false, "every permission enum is the proMCP nine (extensions carry a prefix)"},
	{"start-input", Error, false, "a start_* input has value and idempotency_key (a string)"},
	{"start-response", Error, false, "a start_* response has status (running|failed), operation_id, idempotency_key, expected_completion, side_effects, compensable, timestamp"},
	{"start-companions", Error, false, "a start_<x> comes with read_status_<x> and do_cancel_<x>"},
	{"status-response", Error, false, "a read_status_<x> beside a start_<x> answers operation_id, state (running|succeeded|failed|cancelled|unknown) and progress besides the read_* fields"},
	{"cancel-input", Error, false, "a do_cancel_<x> beside a start_<x> takes operation_id"},
	{"stream-response", Error, false, "a stream_* response has status (subscribed|failed), resource_uri, interval_ms, deadband, first; its annotations say read-only"},
	{"tool-density", Warning, false, "at most 8 tools per server"},
	{"do-density", Warning, false, "at most 5 do_* tools per server"},
	{"annotation-hint", Warning, false, "readOnlyHint agrees with the verb (an error when a do_* claims read-only)"},
	{"live-call", Error, true, "read_* and can_do answer with a JSON body, not a protocol error"},
	{"live-output-schema", Error, true, "structuredContent validates against the tool's outputSchema"},
	{"live-read-contract", Error, true, "a live read_* answer keeps the read contract (quality enum, RFC 3339 timestamp, unit, error means no value)"},
	{"live-cando-contract", Error, true, "a live CapabilityReport keeps its contract (UUIDv4 query_id, derived feasible, explained refusal, valid_until, confidence 0..1, permissions)"},
	{"live-cando-foreign", Error, true, "can_do names only tools this server serves"},
	{"live-cando-coverage", Warning, true, "can_do routes an intent named after a do_* tool to that tool"},
}

func ruleSeverity(id string) Severity {
	for _, r := range Rules {
		if r.ID == id {
			return r.Severity
		}
	}
	panic("lint: unknown rule " + id) // a typo in this package, caught by its tests
}

func finding(rule, tool, format string, args ...any) Finding {
	return Finding{Rule: rule, Severity: ruleSeverity(rule), Tool: tool, Message: fmt.Sprintf(format, args...)}
}

func warning(rule, tool, format string, args ...any) Finding {
	f := finding(rule, tool, format, args...)
	f.Severity = Warning
	return f
}

// Permissions is the proMCP permission enum.
var Permissions = []string{
	"allowed", "requires_human_approval", "policy_denied", "rate_limited", "cooldown_active",
	"out_of_range", "permission_insufficient", "source_unreachable", "partition_no_quorum",
}

// Actions are the can_do intent actions.
var Actions = []string{"read", "create", "update", "delete", "toggle", "increase", "decrease", "set"}

// extensionPermission says whether a non-standard permission carries the
// prefix proMCP requires of extensions (vendor:, x_, x-).
func extensionPermission(p string) bool {
	return strings.Contains(p, ":") || strings.HasPrefix(p, "x_") || strings.HasPrefix(p, "x-")
}

func validPermission(p string) bool { return slices.Contains(Permissions, p) || extensionPermission(p) }

// decodeSchema reads a schema that may be absent (null or missing).
func decodeSchema(raw json.RawMessage) (map[string]any, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return s, nil
}
