package promcp

import (
	"fmt"
	"strconv"

	"github.com/physmcp/physmcpd/manifest"
)

// Schema is a JSON Schema (draft 2020-12) as a JSON object. Every schema here
// is generated per tool from the manifest, so clients see the units, bounds
// and enum values of the device.
type Schema = map[string]any

var (
	qualities         = []any{string(QualityGood), string(QualityStale), string(QualityDegraded), string(QualityError)}
	statuses          = []any{string(StatusSuccess), string(StatusPartial), string(StatusFailed)}
	unroutableReasons = []any{NoProducer, RequirementsUnmet, MalformedRequest}
)

// ReadOutputSchema is the response of read_<c.Name>. The value is not bounded
// by the range: a read may report an implausible (degraded) value, and an
// error read has value null.
func ReadOutputSchema(c *manifest.Capability) Schema {
	value := valueSchema(c, false)
	value["type"] = nullable(value["type"])
	if enum, ok := value["enum"].([]any); ok {
		value["enum"] = append(enum, nil)
	}
	value["description"] = "The measured value" + unitPhrase(c) + rangePhrase(c, "; normal range ", " (outside it quality is degraded)") +
		". null when quality is error."
	return object(Schema{
		"value":     value,
		"unit":      unitSchema(c),
		"timestamp": timestampSchema(""),
		"quality":   Schema{"type": "string", "enum": qualities},
		"device_id": Schema{"type": "string"},
		"detail":    Schema{"type": "string"},
		"source":    Schema{"type": "string"},
	}, "value", "unit", "timestamp", "quality")
}

// DoInputSchema is the input of do_<c.Name>. The value is bounded by the
// manifest range, the hard limit that is never written past; a policy may
// narrow it further, which only the call (or can_do) reveals.
func DoInputSchema(c *manifest.Capability) Schema {
	value := valueSchema(c, true)
	value["description"] = "The value to set" + unitPhrase(c) + rangePhrase(c, "; hard limits ", "") + "."
	s := object(Schema{
		"value": value,
		"idempotency_key": Schema{"type": "string", "minLength": 1, "maxLength": 128,
			"description": "Reuse the same key to retry safely. Generated (and returned) if absent."},
	}, "value")
	s["additionalProperties"] = false
	return s
}

// DoOutputSchema is the response of do_<c.Name>, for success and failure alike.
func DoOutputSchema(c *manifest.Capability) Schema {
	typed := func(what, whenNull string) Schema {
		v := valueSchema(c, false)
		v["type"] = nullable(v["type"])
		if enum, ok := v["enum"].([]any); ok {
			v["enum"] = append(enum, nil)
		}
		v["description"] = what + unitPhrase(c) + "; null " + whenNull + "."
		return v
	}
	return object(Schema{
		"status":            Schema{"type": "string", "enum": statuses},
		"idempotency_key":   Schema{"type": "string"},
		"applied_value":     typed("The value now in effect", "when nothing was applied"),
		"previous_value":    typed("The value before this operation", "when unknown"),
		"side_effects":      stringArray(""),
		"compensable":       Schema{"type": "boolean"},
		"compensation_hint": Schema{"type": []any{"string", "null"}},
		"timestamp":         timestampSchema(""),
		"compensation": object(Schema{
			"tool":      Schema{"type": "string"},
			"arguments": Schema{"type": "object"},
		}, "tool", "arguments"),
		"permission": permissionSchema(""),
		"reason":     Schema{"type": "string"},
		"warnings":   stringArray(""),
		"device_id":  Schema{"type": "string"},
	}, "status", "idempotency_key", "applied_value", "previous_value", "side_effects", "compensable", "compensation_hint", "timestamp")
}

// CanDoInputSchema is the input of can_do. PhysMCP's query and direction are
// accepted as aliases of intent and action. Exactly one of intent and query
// is required, but the schema only says so in words: model APIs (Anthropic,
// OpenAI, Bedrock, Vertex) reject a top-level anyOf in a tool's input, so
// ParseCanDo enforces it and answers malformed_request.
func CanDoInputSchema() Schema {
	intent := func(description string) Schema {
		actions := make([]any, len(Actions))
		for i, a := range Actions {
			actions[i] = a
		}
		s := object(Schema{
			"semantic_tags": Schema{"type": "array", "items": Schema{"type": "string", "minLength": 1}, "minItems": 1,
				"description": "What the action is about, e.g. [heating, setpoint]; matched against each capability's semantic tags."},
			"action":    Schema{"type": "string", "enum": actions, "description": "What to do."},
			"direction": Schema{"type": "string", "enum": actions, "description": "PhysMCP alias of action."},
			"target":    Schema{"type": "string", "description": "The capability or thing to act on, e.g. heater_setpoint."},
			"value": Schema{"anyOf": []any{Schema{"type": "number"}, Schema{"type": "string"}, Schema{"type": "boolean"}},
				"description": "The value you intend to set, checked against ranges and guards."},
			"location": Schema{"type": "string", "description": "Where, e.g. a zone or area of the site."},
		}, "semantic_tags")
		s["additionalProperties"] = false
		s["description"] = description
		return s
	}
	s := object(Schema{
		"intent": intent("What you want to do. Required unless you give its alias query instead (never both)."),
		"query":  intent("PhysMCP alias of intent: give intent or query, exactly one."),
		"scope":  stringArray("Limit the answer to these capabilities, tools or device ids."),
		"max_candidates": Schema{"type": "integer", "minimum": 1,
			"description": fmt.Sprintf("List at most this many candidates, this many blocked entries and this many related reads, the best matches first (default %d); metadata.omitted counts the rest.", DefaultMaxCandidates)},
	})
	s["description"] = "Give exactly one of intent and its PhysMCP alias query; neither or both is answered as malformed_request."
	s["additionalProperties"] = false
	return s
}

// CanDoOutputSchema is the CapabilityReport can_do returns.
func CanDoOutputSchema() Schema {
	nullableNumber := Schema{"type": []any{"number", "null"}}
	candidate := object(Schema{
		"capability": Schema{"type": "string", "description": "The tool to call."},
		"source":     Schema{"type": "string", "description": "Who serves it (this device)."},
		"confidence": Schema{"type": "number", "minimum": 0, "maximum": 1,
			"description": "How well the capability matches the intent; below 0.7 confirm before acting."},
		"permission": permissionSchema("allowed means the call would execute now."),
		"current_state": object(Schema{
			"value":     Schema{"description": "The last known value, null if none."},
			"unit":      Schema{"type": []any{"string", "null"}},
			"timestamp": timestampSchema("When the value was measured."),
		}, "value", "unit", "timestamp"),
		"constraints": object(Schema{
			"min":         nullableNumber,
			"max":         nullableNumber,
			"unit":        Schema{"type": []any{"string", "null"}},
			"enum_values": Schema{"type": []any{"array", "null"}, "items": Schema{"type": "string"}},
			"rate_limit":  Schema{"type": "string"},
			"cooldown_ms": Schema{"type": "integer", "minimum": 0},
			"min_role":    Schema{"type": "string", "description": "The lowest role the call is allowed for."},
			"roles":       Schema{"type": "array", "items": Schema{"type": "string"}, "description": "Present when a role above min_role is not allowed: the roles that are."},
			"quorum": object(Schema{
				"min_peers": Schema{"type": "integer", "minimum": 1, "description": "Nodes that must confirm, this one included."},
				"peers":     Schema{"type": "string", "enum": []any{"zone", "mesh"}, "description": "Which alive peers count and vote."},
				"check":     Schema{"type": "string", "description": "The quorum check each voting peer runs under its own policy before it confirms."},
			}, "min_peers", "peers"),
		}, "min", "max", "unit", "enum_values"),
		"side_effects":         stringArray("What else changes when this acts."),
		"valid_until":          timestampSchema("Do not act on this candidate after this instant; call can_do again."),
		"estimated_latency_ms": Schema{"type": "integer", "minimum": 0},
		"device_id":            Schema{"type": "string"},
		"match_reasons":        stringArray("Why the capability matched."),
		"adopted_from":         adoptedFromSchema,
		"endpoint":             endpointSchema,
	}, "capability", "source", "confidence", "permission", "current_state", "constraints", "side_effects", "valid_until", "estimated_latency_ms")
	blocked := object(Schema{
		"capability":    Schema{"type": "string"},
		"source":        Schema{"type": "string"},
		"permission":    permissionSchema("Why it cannot act now."),
		"reason":        Schema{"type": "string"},
		"details":       Schema{"type": []any{"string", "null"}},
		"clears_at":     timestampSchema("When the block is expected to clear."),
		"confidence":    Schema{"type": "number", "minimum": 0, "maximum": 1},
		"match_reasons": stringArray("Why the capability matched."),
		"adopted_from":  adoptedFromSchema,
		"endpoint":      endpointSchema,
		"device_id":     Schema{"type": "string"},
	}, "capability", "source", "permission", "reason", "details")
	unroutable := object(Schema{
		"outcome": Schema{"type": "string", "const": OutcomeUnroutable},
		"reason":  Schema{"type": "string", "enum": unroutableReasons},
		"detail":  Schema{"type": "string", "description": "What is wrong, in words."},
	}, "outcome", "reason", "detail")
	return object(Schema{
		"query_id": Schema{"type": "string", "format": "uuid"},
		"feasible": Schema{"type": "boolean",
			"description": "True iff some candidate has permission allowed; false is explained by blocked or unroutable."},
		"candidates": Schema{"type": "array", "items": candidate},
		"blocked":    Schema{"type": "array", "items": blocked},
		"unroutable": Schema{"type": "array", "items": unroutable,
			"description": "Why the intent could not be routed at all; non-empty means feasible is false."},
		"context": object(Schema{
			"related_reads":        stringArray("read_* tools to call (in parallel) before acting."),
			"current_observations": Schema{"type": "object"},
		}, "related_reads", "current_observations"),
		"metadata": object(Schema{
			"timestamp":        timestampSchema("When the report was made."),
			"total_latency_ms": Schema{"type": "integer", "minimum": 0},
			"device_id":        Schema{"type": "string"},
			"promcp_base":      Schema{"type": "string"},
			// PhysMCP mesh, on a node in a mesh
			"coordinator_node":       Schema{"type": "string"},
			"ttl_used":               Schema{"type": "integer", "minimum": 0},
			"fanout_used":            Schema{"type": "integer", "minimum": 0},
			"peers_consulted":        Schema{"type": "integer", "minimum": 0},
			"responses_received":     Schema{"type": "integer", "minimum": 0},
			"responses_dropped_late": Schema{"type": "integer", "minimum": 0},
			"mesh_size_estimate":     Schema{"type": "integer", "minimum": 1},
			"partition_state":        Schema{"type": "string", "enum": []any{"none", "suspected", "healing"}},
			"duplicate_query":        Schema{"type": "boolean", "description": "A peer's empty answer to a query it answered on another path."},
			"omitted":                omittedSchema,
		}, "timestamp", "total_latency_ms"),
	}, "query_id", "feasible", "candidates", "blocked", "unroutable", "context", "metadata")
}

// valueSchema types a capability value; bounded adds the range as minimum and maximum.
func valueSchema(c *manifest.Capability, bounded bool) Schema {
	var s Schema
	switch c.DataType {
	case manifest.TypeFloat:
		s = Schema{"type": "number"}
	case manifest.TypeInt:
		s = Schema{"type": "integer"}
	case manifest.TypeBool:
		s = Schema{"type": "boolean"}
	case manifest.TypeEnum:
		enum := make([]any, len(c.EnumValues))
		for i, v := range c.EnumValues {
			enum[i] = v
		}
		s = Schema{"type": "string", "enum": enum}
	default:
		s = Schema{"type": "string"}
	}
	if bounded && c.IsNumeric() && c.Range != nil {
		if c.Range.Min != nil {
			s["minimum"] = *c.Range.Min
		}
		if c.Range.Max != nil {
			s["maximum"] = *c.Range.Max
		}
	}
	return s
}

func unitSchema(c *manifest.Capability) Schema {
	if c.Unit == "" {
		return Schema{"type": "null"}
	}
	return Schema{"type": "string", "const": c.Unit}
}

func unitPhrase(c *manifest.Capability) string {
	if c.Unit == "" {
		return ""
	}
	return " in " + c.Unit
}

// rangePhrase describes a numeric range in words, or returns "" when there is none.
func rangePhrase(c *manifest.Capability, before, after string) string {
	if !c.IsNumeric() || c.Range == nil || (c.Range.Min == nil && c.Range.Max == nil) {
		return ""
	}
	return before + RangeText(c.Range, c.Unit) + after
}

// RangeText writes a range as "5 to 35 °C", "at least 5 °C" or "at most 35 °C".
func RangeText(r *manifest.Range, unit string) string {
	suffix := ""
	if unit != "" {
		suffix = " " + unit
	}
	switch {
	case r.Min != nil && r.Max != nil:
		return fmt.Sprintf("%s to %s%s", Number(*r.Min), Number(*r.Max), suffix)
	case r.Min != nil:
		return "at least " + Number(*r.Min) + suffix
	case r.Max != nil:
		return "at most " + Number(*r.Max) + suffix
	}
	return ""
}

// Number writes a float the shortest way that reads back exactly (21, 21.5).
func Number(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// adoptedFromSchema is PhysMCP's adopted_from of a proxy's capability.
var adoptedFromSchema = object(Schema{
	"source_address":  Schema{"type": "string", "description": "The serial line, command or URL of the source."},
	"source_protocol": Schema{"type": "string", "enum": []any{manifest.SourceSerial, manifest.SourceStdio, manifest.SourceHTTP}},
}, "source_address", "source_protocol")

// omittedSchema is what a capped report left out (Omitted).
var omittedSchema = func() Schema {
	entries := object(Schema{
		"count":           Schema{"type": "integer", "minimum": 0},
		"best_confidence": Schema{"type": "number", "minimum": 0, "maximum": 1},
		"permissions":     Schema{"type": "object", "additionalProperties": Schema{"type": "integer", "minimum": 1}},
	}, "count", "best_confidence", "permissions")
	s := object(Schema{
		"max_candidates": Schema{"type": "integer", "minimum": 1},
		"candidates":     entries,
		"blocked":        entries,
		"related_reads": object(Schema{
			"count": Schema{"type": "integer", "minimum": 0},
		}, "count"),
		"hint": Schema{"type": "string"},
	}, "max_candidates", "candidates", "blocked", "related_reads", "hint")
	s["description"] = "Present when the answer left matches or related reads out (max_candidates): how many, matches by permission, and how to see them."
	return s
}()

// endpointSchema names the endpoint that serves a tool (an aggregator's site can_do).
var endpointSchema = Schema{"type": "string", "description": "Where to call this tool when not here: the MCP endpoint URL of the mesh peer that serves it, or the HTTP path of the group endpoint on an aggregator's site endpoint."}

func object(props Schema, required ...string) Schema {
	s := Schema{"type": "object", "properties": props}
	if len(required) > 0 {
		req := make([]any, len(required))
		for i, r := range required {
			req[i] = r
		}
		s["required"] = req
	}
	return s
}

// stringArray, timestampSchema and permissionSchema leave the description
// out when it is "": the read_* and do_* bodies repeat in every tool, and
// what their fields mean is said once, in the server's instructions.
func stringArray(description string) Schema {
	return described(Schema{"type": "array", "items": Schema{"type": "string"}}, description)
}

func timestampSchema(description string) Schema {
	return described(Schema{"type": "string", "format": "date-time"}, description)
}

func described(s Schema, description string) Schema {
	if description != "" {
		s["description"] = description
	}
	return s
}

func permissionSchema(description string) Schema {
	enum := make([]any, 0, len(Permissions)+len(ExtensionPermissions))
	for _, p := range append(Permissions[:len(Permissions):len(Permissions)], ExtensionPermissions...) {
		enum = append(enum, string(p))
	}
	return described(Schema{"type": "string", "enum": enum}, description)
}

func nullable(t any) any { return []any{t, "null"} }
