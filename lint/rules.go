package lint

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// proMCP advises grouping tools into several servers above these counts.
const (
	MaxTools   = 8
	MaxDoTools = 5
)

var (
	namePattern = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	// Whole words only: the reference linter matches substrings, which flags
	// honest reads such as read_heater_setpoint ("setpoint") or an "offset".
	mutationWords = regexp.MustCompile(`(?i)\b(creat(e|es|ed|ing)|updat(e|es|ed|ing)|delet(e|es|ed|ing)|sets?|setting|resets?|resetting|trigger(s|ed|ing)?|send(s|ing)?|sent|writ(e|es|ing|ten)|wrote|insert(s|ed|ing)?|modif(y|ies|ied|ying))\b`)
	// Subjects that say nothing about what a tool reads or changes.
	genericSubjects = map[string]bool{
		"data": true, "value": true, "values": true, "info": true, "information": true, "result": true,
		"results": true, "item": true, "items": true, "object": true, "thing": true, "stuff": true, "all": true,
		"state": true, "status": true, "update": true, "set": true, "change": true, "action": true,
		"execute": true, "run": true, "do": true, "write": true, "modify": true, "call": true, "perform": true,
	}
)

// Check applies every static rule to a server's tool list.
func Check(tools []Tool) []Finding { return CheckWith(tools, Options{}) }

// CheckWith is Check with options.
func CheckWith(tools []Tool, opts Options) []Finding {
	var out []Finding
	counts := map[string]int{}
	var canDo, do int
	for _, t := range tools {
		counts[t.Name]++
		switch KindOf(t.Name) {
		case KindCanDo:
			canDo++
		case KindDo:
			do++
		}
		out = append(out, checkTool(t, opts)...)
	}
	out = append(out, checkOperations(tools)...)
	dups := make([]string, 0)
	for name, n := range counts {
		if n > 1 {
			dups = append(dups, name)
		}
	}
	sort.Strings(dups)
	for _, name := range dups {
		out = append(out, finding("name-duplicate", name, "%d tools are named %s", counts[name], name))
	}
	switch {
	case canDo > 1:
		out = append(out, finding("cando-single", "", "%d tools are named can_do; a server has exactly one", canDo))
	case canDo == 0 && do > 0:
		out = append(out, finding("cando-single", "", "no can_do: a server with do_* tools must offer the dry run before acting"))
	case canDo == 0 && len(tools) > 0:
		out = append(out, warning("cando-single", "", "no can_do: a server has exactly one"))
	}
	if len(tools) > MaxTools {
		out = append(out, finding("tool-density", "", "%d tools (more than %d): tool selection degrades; split them into several servers or endpoints", len(tools), MaxTools))
	}
	if do > MaxDoTools {
		out = append(out, finding("do-density", "", "%d do_* tools (more than %d): split them into several servers or endpoints", do, MaxDoTools))
	}
	return out
}

func checkTool(t Tool, opts Options) []Finding {
	var out []Finding
	add := func(f Finding) { out = append(out, f) }
	name := t.Name
	if !namePattern.MatchString(name) || len(name) > 64 {
		add(finding("name-format", name, "%q must match ^[a-z][a-z0-9_]*$ and have at most 64 characters", name))
	}
	kind := KindOf(name)
	switch {
	case kind == "":
		add(finding("name-verb", name, "%q is none of read_<x>, do_<x>, can_do: every tool declares its verb by its name", name))
	case kind.Extension() && opts.StrictBase:
		add(finding("name-verb", name, "%q is a %s_<x> tool, physmcpd's documented extension for proMCP's roadmap (docs/roadmap.md), not base proMCP v0.2 (read_<x>, do_<x>, can_do)", name, kind))
	}
	if kind == KindRead || kind == KindDo {
		subject := strings.TrimPrefix(strings.TrimPrefix(name, "read_"), "do_")
		if genericSubjects[subject] {
			add(finding("name-generic", name, "%q says what it does but not what it is about; name the quantity or thing", name))
		}
	}

	desc := strings.TrimSpace(t.Description)
	switch {
	case desc == "":
		add(finding("description-missing", name, "no description: agents choose tools by it"))
	case len(desc) < 20:
		add(finding("description-short", name, "description %q is too short to choose by (at least 20 characters)", desc))
	}
	if kind == KindRead {
		if words := uniqueMatches(mutationWords, desc); len(words) > 0 {
			add(finding("read-description-mutation", name, "a read_* description must not sound like a mutation; it says %s", strings.Join(words, ", ")))
		}
	}

	if t.InputSchema == nil {
		add(finding("input-schema", name, "no inputSchema"))
	} else if typ, _ := t.InputSchema["type"].(string); typ != "object" {
		add(finding("input-schema", name, `inputSchema must have type "object"`))
	} else {
		for _, p := range ModelAPIProblems(t.InputSchema) {
			add(finding("schema-portable", name, "inputSchema: %s; Anthropic, OpenAI, Bedrock or Vertex refuse such a tool", p))
		}
	}
	if t.OutputSchema != nil {
		for _, p := range BareBooleans(t.OutputSchema) {
			add(finding("schema-portable", name, "outputSchema: %s; MCP Inspector --strict fails on it", p))
		}
	}
	switch kind {
	case KindDo:
		out = append(out, checkDoInput(t)...)
	case KindCanDo:
		out = append(out, checkCanDoInput(t)...)
	case KindStart:
		out = append(out, checkStartInput(t)...)
	}

	if t.OutputSchema == nil {
		if kind != "" {
			add(finding("response-schema-missing", name, "no outputSchema (responseSchema): clients cannot know or check the %s contract", kind))
		}
	} else {
		switch kind {
		case KindRead:
			out = append(out, checkReadResponse(t)...)
		case KindDo:
			out = append(out, checkDoResponse(t)...)
		case KindCanDo:
			out = append(out, checkCanDoResponse(t)...)
		case KindStart:
			out = append(out, checkStartResponse(t)...)
		case KindStream:
			out = append(out, checkStreamResponse(t)...)
		}
		out = append(out, checkPermissionEnums(name, t.OutputSchema, "")...)
	}

	if a := t.Annotations; a != nil && a.ReadOnlyHint != nil {
		switch {
		case (kind == KindDo || kind == KindStart) && *a.ReadOnlyHint:
			f := finding("annotation-hint", name, "a %s_* tool claims readOnlyHint true: clients may call it without asking", kind)
			f.Severity = Error
			add(f)
		case (kind == KindRead || kind == KindCanDo || kind == KindStream) && !*a.ReadOnlyHint:
			add(finding("annotation-hint", name, "readOnlyHint is false on a tool without side effects: clients will ask before every call"))
		}
	}
	return out
}

func checkDoInput(t Tool) []Finding {
	key, ok := properties(t.InputSchema)["idempotency_key"]
	if !ok {
		return []Finding{finding("do-idempotency-key", t.Name, "inputSchema has no idempotency_key: retries are unsafe")}
	}
	if ks, ok := key.(map[string]any); ok {
		if !typeAllows(ks, "string") {
			return []Finding{warning("do-idempotency-key", t.Name, "idempotency_key should be a string")}
		}
	}
	return nil
}

func checkCanDoInput(t Tool) []Finding {
	props := properties(t.InputSchema)
	intent, ok := props["intent"].(map[string]any)
	if !ok {
		return []Finding{finding("cando-intent", t.Name, "inputSchema has no intent object")}
	}
	ip := properties(intent)
	tags, ok := ip["semantic_tags"].(map[string]any)
	if !ok {
		return []Finding{finding("cando-intent", t.Name, "intent has no semantic_tags")}
	}
	var out []Finding
	if !typeAllows(tags, "array") {
		out = append(out, finding("cando-intent", t.Name, "intent.semantic_tags must be an array"))
	}
	if action, ok := ip["action"].(map[string]any); ok {
		for _, v := range enumStrings(action) {
			if !slices.Contains(Actions, v) {
				out = append(out, warning("cando-intent", t.Name, "intent.action allows %q, which is not a proMCP action (%s)", v, strings.Join(Actions, ", ")))
			}
		}
	} else {
		out = append(out, warning("cando-intent", t.Name, "intent has no action (%s)", strings.Join(Actions, "|")))
	}
	return out
}

func checkReadResponse(t Tool) []Finding {
	props := properties(t.OutputSchema)
	var out []Finding
	if missing := missingKeys(props, "value", "unit", "timestamp", "quality"); len(missing) > 0 {
		out = append(out, finding("read-response", t.Name, "response schema lacks %s", strings.Join(missing, ", ")))
	}
	if q, ok := props["quality"].(map[string]any); ok {
		if got := enumStrings(q); got != nil && !sameSet(got, []string{"good", "stale", "degraded", "error"}) {
			out = append(out, finding("read-response", t.Name, "quality enum is [%s], want good, stale, degraded, error", strings.Join(got, ", ")))
		}
	}
	if _, ok := props["side_effects"]; ok {
		out = append(out, finding("read-side-effects", t.Name, "a read_* response declares side_effects: a read has none (make it a do_* if it acts)"))
	}
	return out
}

func checkDoResponse(t Tool) []Finding {
	props := properties(t.OutputSchema)
	var out []Finding
	out = append(out, lacking("do-response", t.Name, "response schema", missingKeys(props, "status", "idempotency_key",
		"applied_value", "previous_value", "side_effects", "compensable", "compensation_hint", "timestamp"))...)
	if s, ok := props["status"].(map[string]any); ok {
		for _, v := range enumStrings(s) {
			if !slices.Contains([]string{"success", "partial", "failed"}, v) {
				out = append(out, finding("do-response", t.Name, "status allows %q; want success, partial or failed", v))
			}
		}
	}
	if missing := missingKeys(requiredSet(t.OutputSchema), "status", "idempotency_key", "compensable"); len(missing) > 0 {
		out = append(out, warning("do-response", t.Name, "response schema does not require %s", strings.Join(missing, ", ")))
	}
	return out
}

func checkCanDoResponse(t Tool) []Finding {
	var out []Finding
	lacks := func(where string, schema map[string]any, keys ...string) {
		out = append(out, lacking("cando-response", t.Name, where, missingKeys(properties(schema), keys...))...)
	}
	report := t.OutputSchema
	lacks("CapabilityReport", report, "query_id", "feasible", "candidates", "blocked", "context", "metadata")
	props := properties(report)
	if c := items(props["candidates"]); c != nil {
		lacks("candidates[]", c, "capability", "source", "confidence", "permission", "current_state", "constraints",
			"side_effects", "valid_until", "estimated_latency_ms")
		cp := properties(c)
		if cs, ok := cp["current_state"].(map[string]any); ok {
			lacks("candidates[].current_state", cs, "value", "unit", "timestamp")
		}
		if cs, ok := cp["constraints"].(map[string]any); ok {
			lacks("candidates[].constraints", cs, "min", "max", "unit", "enum_values")
		}
	} else if _, ok := props["candidates"]; ok {
		out = append(out, finding("cando-response", t.Name, "candidates must be an array of candidate objects"))
	}
	if b := items(props["blocked"]); b != nil {
		lacks("blocked[]", b, "capability", "source", "permission", "reason", "details")
	}
	if u, ok := props["unroutable"]; ok {
		if ui := items(u); ui != nil {
			lacks("unroutable[]", ui, "outcome", "reason", "detail")
		}
	} else {
		out = append(out, warning("cando-response", t.Name, "CapabilityReport lacks unroutable (why an intent matched nothing)"))
	}
	if c, ok := props["context"].(map[string]any); ok {
		lacks("context", c, "related_reads", "current_observations")
	}
	if m, ok := props["metadata"].(map[string]any); ok {
		lacks("metadata", m, "timestamp", "total_latency_ms")
	}
	return out
}

// lacking reports the fields a response schema lacks: one finding for those
// the seed's validator has a code for, each alone with its code, one for the rest.
func lacking(rule, tool, where string, missing []string) []Finding {
	var out []Finding
	var rest []string
	for _, field := range missing {
		if code := seedCode(rule, field); code != "" {
			f := finding(rule, tool, "%s lacks %s", where, field)
			f.Code = code
			out = append(out, f)
		} else {
			rest = append(rest, field)
		}
	}
	if len(rest) > 0 {
		out = append(out, finding(rule, tool, "%s lacks %s", where, strings.Join(rest, ", ")))
	}
	return out
}

// checkPermissionEnums finds every property named permission and checks its enum.
func checkPermissionEnums(tool string, s map[string]any, at string) []Finding {
	var out []Finding
	props := properties(s)
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	sort.Strings(names) // findings in a stable order
	for _, name := range names {
		subSchema, ok := props[name].(map[string]any)
		if !ok {
			continue
		}
		path := at + "/" + name
		if name == "permission" {
			values := enumStrings(subSchema)
			var bad []string
			for _, v := range values {
				if !validPermission(v) {
					bad = append(bad, v)
				}
			}
			if len(bad) > 0 {
				out = append(out, finding("permission-enum", tool, "%s allows %s: not proMCP permissions (extensions carry a prefix such as vendor:)", path, strings.Join(bad, ", ")))
			}
			if values != nil {
				if missing := missingFrom(values, Permissions); len(missing) > 0 {
					out = append(out, warning("permission-enum", tool, "%s lacks %s", path, strings.Join(missing, ", ")))
				}
			}
		}
		out = append(out, checkPermissionEnums(tool, subSchema, path)...)
		if it := items(subSchema); it != nil {
			out = append(out, checkPermissionEnums(tool, it, path+"[]")...)
		}
	}
	return out
}

// properties merges an object schema's properties with those of its
// anyOf/oneOf/allOf branches, where some servers put them.
func properties(s map[string]any) map[string]any {
	out := map[string]any{}
	if s == nil {
		return out
	}
	for _, key := range []string{"allOf", "anyOf", "oneOf"} {
		if branches, ok := s[key].([]any); ok {
			for _, b := range branches {
				if bs, ok := b.(map[string]any); ok {
					for k, v := range properties(bs) {
						if _, isBool := v.(bool); !isBool || out[k] == nil {
							out[k] = v
						}
					}
				}
			}
		}
	}
	if p, ok := s["properties"].(map[string]any); ok {
		for k, v := range p {
			out[k] = v
		}
	}
	return out
}

func items(v any) map[string]any {
	s, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	it, _ := s["items"].(map[string]any)
	return it
}

func requiredSet(s map[string]any) map[string]any {
	out := map[string]any{}
	if list, ok := s["required"].([]any); ok {
		for _, r := range list {
			if name, ok := r.(string); ok {
				out[name] = true
			}
		}
	}
	return out
}

func missingKeys(m map[string]any, keys ...string) []string {
	var missing []string
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			missing = append(missing, k)
		}
	}
	return missing
}

// enumStrings is a schema's string enum (from enum, or const), nil when it has none.
func enumStrings(s map[string]any) []string {
	var out []string
	if list, ok := s["enum"].([]any); ok {
		out = []string{}
		for _, v := range list {
			if str, ok := v.(string); ok {
				out = append(out, str)
			}
		}
	} else if c, ok := s["const"].(string); ok {
		out = []string{c}
	}
	return out
}

func typeAllows(s map[string]any, want string) bool {
	switch t := s["type"].(type) {
	case nil:
		return true
	case string:
		return t == want
	case []any:
		for _, x := range t {
			if x == want {
				return true
			}
		}
	}
	return false
}

func sameSet(a, b []string) bool {
	return len(missingFrom(a, b)) == 0 && len(missingFrom(b, a)) == 0
}

// missingFrom lists the members of want that have is missing.
func missingFrom(have, want []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(have, w) {
			out = append(out, w)
		}
	}
	return out
}

func uniqueMatches(re *regexp.Regexp, s string) []string {
	var out []string
	for _, m := range re.FindAllString(s, -1) {
		q := fmt.Sprintf("%q", strings.ToLower(m))
		if !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	return out
}
