package lint

import (
	"slices"
	"strings"
)

// Asynchronous operations and streams, physmcpd's proposal for proMCP's roadmap v0.3
// (docs/roadmap.md): start_<x> answers at once with an operation id,
// read_status_<x> observes it and do_cancel_<x> stops it. The companions
// keep base prefixes and base contracts; only start_ is an extension verb.

func checkStartInput(t Tool) []Finding {
	props := properties(t.InputSchema)
	var out []Finding
	if missing := missingKeys(props, "value", "idempotency_key"); len(missing) > 0 {
		out = append(out, finding("start-input", t.Name, "inputSchema lacks %s", strings.Join(missing, ", ")))
	}
	if key, ok := props["idempotency_key"].(map[string]any); ok && !typeAllows(key, "string") {
		out = append(out, finding("start-input", t.Name, "idempotency_key must be a string"))
	}
	return out
}

func checkStartResponse(t Tool) []Finding {
	props := properties(t.OutputSchema)
	out := lacking("start-response", t.Name, "response schema", missingKeys(props, "status", "operation_id", "idempotency_key",
		"expected_completion", "side_effects", "compensable", "timestamp"))
	if s, ok := props["status"].(map[string]any); ok {
		for _, v := range enumStrings(s) {
			if v != "running" && v != "failed" {
				out = append(out, finding("start-response", t.Name, "status allows %q; want running or failed", v))
			}
		}
	}
	return out
}

// checkOperations checks each start_<x> against its companions.
func checkOperations(tools []Tool) []Finding {
	byName := map[string]Tool{}
	for _, t := range tools {
		byName[t.Name] = t
	}
	var out []Finding
	for _, t := range tools {
		if KindOf(t.Name) != KindStart {
			continue
		}
		x := strings.TrimPrefix(t.Name, "start_")
		status, hasStatus := byName["read_status_"+x]
		cancel, hasCancel := byName["do_cancel_"+x]
		var missing []string
		if !hasStatus {
			missing = append(missing, "read_status_"+x)
		}
		if !hasCancel {
			missing = append(missing, "do_cancel_"+x)
		}
		if len(missing) > 0 {
			out = append(out, finding("start-companions", t.Name, "lacks %s: an operation that cannot be followed or stopped", strings.Join(missing, " and ")))
		}
		if hasStatus && status.OutputSchema != nil {
			props := properties(status.OutputSchema)
			out = append(out, lacking("status-response", status.Name, "response schema", missingKeys(props, "operation_id", "state", "progress"))...)
			if st, ok := props["state"].(map[string]any); ok {
				for _, v := range enumStrings(st) {
					if !slices.Contains([]string{"running", "succeeded", "failed", "cancelled", "unknown"}, v) {
						out = append(out, finding("status-response", status.Name, "state allows %q; want running, succeeded, failed, cancelled or unknown", v))
					}
				}
			}
		}
		if hasCancel {
			if _, ok := properties(cancel.InputSchema)["operation_id"]; !ok {
				out = append(out, finding("cancel-input", cancel.Name, "inputSchema lacks operation_id"))
			}
		}
	}
	return out
}

// checkStreamResponse checks stream_<x> (roadmap v0.4): a subscription to the
// reading's resource, whose updates arrive as notifications/resources/updated.
func checkStreamResponse(t Tool) []Finding {
	props := properties(t.OutputSchema)
	out := lacking("stream-response", t.Name, "response schema", missingKeys(props, "status", "resource_uri", "interval_ms", "deadband", "first"))
	if s, ok := props["status"].(map[string]any); ok {
		for _, v := range enumStrings(s) {
			if v != "subscribed" && v != "failed" {
				out = append(out, finding("stream-response", t.Name, "status allows %q; want subscribed or failed", v))
			}
		}
	}
	return out
}
