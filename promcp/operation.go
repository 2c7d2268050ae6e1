package promcp

import (
	"github.com/physmcp/physmcpd/manifest"
)

// physmcpd's proposal for the proMCP roadmap (docs/roadmap.md): v0.3
// asynchronous operations (start_* answers at once with an operation id,
// read_status_* observes it, do_cancel_* stops it and drives the point to its
// safe value) and v0.5 compensation (a sequence is a do_* whose answer
// reports every step and every compensation). The answers are supersets of
// the v0.2 contracts where a tool keeps a base prefix: read_status_* answers
// value, unit, timestamp and quality like any read_*, and do_cancel_* and a
// sequence's do_* answer the do_* fields.

// OpState is where an operation stands.
type OpState string

const (
	OpRunning   OpState = "running"
	OpSucceeded OpState = "succeeded"
	OpFailed    OpState = "failed"
	OpCancelled OpState = "cancelled"
	// OpUnknown: no operation has this id (or it ended more than 24 h ago).
	OpUnknown OpState = "unknown"
)

var opStates = []any{string(OpRunning), string(OpSucceeded), string(OpFailed), string(OpCancelled), string(OpUnknown)}

// StartRequest is the input of start_*.
type StartRequest struct {
	Value          any    `json:"value"`
	DurationMs     int    `json:"duration_ms,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// StartResponse is what start_* answers, at once.
type StartResponse struct {
	// Status is running when the operation started, failed when it was refused.
	Status         OpState `json:"status"`
	OperationID    *string `json:"operation_id"`
	IdempotencyKey string  `json:"idempotency_key"`
	// TargetValue is what the operation drives the point to (after a clamp guard).
	TargetValue        any      `json:"target_value"`
	PreviousValue      any      `json:"previous_value"`
	ExpectedCompletion *string  `json:"expected_completion"`
	Deadline           *string  `json:"deadline"`
	SideEffects        []string `json:"side_effects"`
	// Compensable: cancelling stops the operation and drives the point to its safe value.
	Compensable      bool          `json:"compensable"`
	CompensationHint *string       `json:"compensation_hint"`
	Compensation     *Compensation `json:"compensation,omitempty"`
	StatusTool       string        `json:"status_tool"`
	Timestamp        string        `json:"timestamp"`
	Permission       Permission    `json:"permission,omitempty"`
	Reason           string        `json:"reason,omitempty"`
	Warnings         []string      `json:"warnings,omitempty"`
	DeviceID         string        `json:"device_id,omitempty"`
}

// StatusRequest is the input of read_status_*.
type StatusRequest struct {
	OperationID string `json:"operation_id"`
	// WaitMs, when set, holds the answer until the operation ends or WaitMs
	// passes; progress notifications are sent meanwhile to a client that gave
	// a progressToken.
	WaitMs int `json:"wait_ms,omitempty"`
}

// MaxWaitMs bounds read_status_*'s wait_ms.
const MaxWaitMs = 60000

// StatusResponse is what read_status_* answers: a read_* body (value, unit,
// timestamp and quality of the point the operation observes) and the
// operation's state.
type StatusResponse struct {
	Value     any     `json:"value"`
	Unit      *string `json:"unit"`
	Timestamp string  `json:"timestamp"`
	Quality   Quality `json:"quality"`

	OperationID        string   `json:"operation_id"`
	State              OpState  `json:"state"`
	Progress           float64  `json:"progress"`
	TargetValue        any      `json:"target_value"`
	LastWritten        any      `json:"last_written"`
	Writes             int      `json:"writes"`
	StartedAt          *string  `json:"started_at"`
	UpdatedAt          *string  `json:"updated_at"`
	ExpectedCompletion *string  `json:"expected_completion"`
	Deadline           *string  `json:"deadline"`
	EndedAt            *string  `json:"ended_at"`
	Reason             string   `json:"reason,omitempty"`
	Observed           string   `json:"observed,omitempty"`
	Warnings           []string `json:"warnings,omitempty"`
	DeviceID           string   `json:"device_id,omitempty"`
	Detail             string   `json:"detail,omitempty"`
}

// CancelRequest is the input of do_cancel_*.
type CancelRequest struct {
	OperationID    string `json:"operation_id"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// CancelResponse is a do_* answer for the safe-value write, with the
// operation's state after cancelling.
type CancelResponse struct {
	DoResponse
	OperationID string  `json:"operation_id"`
	State       OpState `json:"state"`
}

// StepOutcome is one step of a sequence, or one compensation, as its answer reports it.
type StepOutcome struct {
	Step           int            `json:"step"`
	Tool           string         `json:"tool"`
	Arguments      map[string]any `json:"arguments"`
	IdempotencyKey string         `json:"idempotency_key"`
	// Status is success, partial or failed for a do_*; running (started),
	// succeeded or failed for a start_*; skipped for a step never tried.
	Status      string     `json:"status"`
	Permission  Permission `json:"permission,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	OperationID string     `json:"operation_id,omitempty"`
	Applied     any        `json:"applied_value"`
	Previous    any        `json:"previous_value"`
}

// SequenceRequest is the input of a sequence's do_*.
type SequenceRequest struct {
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// Sequence outcomes.
const (
	SequenceCompleted          = "completed"
	SequenceCompensated        = "compensated"
	SequenceCompensationFailed = "compensation_failed"
)

// SequenceResponse is a do_* answer for a whole sequence with every step's
// and every compensation's outcome.
type SequenceResponse struct {
	DoResponse
	Outcome       string        `json:"outcome"`
	FailedStep    *int          `json:"failed_step"`
	Steps         []StepOutcome `json:"steps"`
	Compensations []StepOutcome `json:"compensations"`
}

// StartInputSchema is the input of start_<o.Name>.
func StartInputSchema(o *manifest.Operation) Schema {
	value := valueSchema(o.Target, true)
	value["description"] = "The value the operation drives " + o.Target.ToolName() + " to" + unitPhrase(o.Target) + rangePhrase(o.Target, "; hard limits ", "") + "."
	props := Schema{
		"value":           value,
		"idempotency_key": idempotencyKeySchema("Identifies this operation. A retry with the same key answers the first start (the same operation_id) and starts nothing. Generated (and returned) if absent."),
	}
	required := []string{"value"}
	if r := o.Run; r != nil {
		props["duration_ms"] = Schema{"type": "integer", "minimum": 1, "maximum": r.MaxDurationMs,
			"description": "How long to hold the value before the run ends, in milliseconds."}
		required = append(required, "duration_ms")
	}
	s := object(props, required...)
	s["additionalProperties"] = false
	return s
}

func idempotencyKeySchema(description string) Schema {
	return Schema{"type": "string", "minLength": 1, "maxLength": 128, "description": description}
}

func nullableTimestamp(description string) Schema {
	return Schema{"type": []any{"string", "null"}, "format": "date-time", "description": description}
}

func nullableValue(c *manifest.Capability, description string) Schema {
	v := valueSchema(c, false)
	v["type"] = nullable(v["type"])
	if enum, ok := v["enum"].([]any); ok {
		v["enum"] = append(enum, nil)
	}
	v["description"] = description + unitPhrase(c) + "."
	return v
}

// StartOutputSchema is the response of start_<o.Name>.
func StartOutputSchema(o *manifest.Operation) Schema {
	return object(Schema{
		"status": Schema{"type": "string", "enum": []any{string(OpRunning), string(OpFailed)},
			"description": "running: the operation started (follow it with " + o.StatusTool() + "); failed: nothing was started (see permission and reason)."},
		"operation_id":        Schema{"type": []any{"string", "null"}, "description": "The operation's id for " + o.StatusTool() + " and " + o.CancelTool() + "; null when refused."},
		"idempotency_key":     Schema{"type": "string"},
		"target_value":        nullableValue(o.Target, "What the operation drives the point to"),
		"previous_value":      nullableValue(o.Target, "The point's value when the operation started"),
		"expected_completion": nullableTimestamp("When the operation should end if nothing stops it."),
		"deadline":            nullableTimestamp("When a still running operation is ended as failed."),
		"side_effects":        stringArray("What else changes in the world while this runs."),
		"compensable":         Schema{"type": "boolean", "description": "Whether the operation can be stopped and undone (see compensation_hint)."},
		"compensation_hint":   Schema{"type": []any{"string", "null"}, "description": "The call that stops it and drives the point to its safe value."},
		"compensation": object(Schema{
			"tool":      Schema{"type": "string"},
			"arguments": Schema{"type": "object"},
		}, "tool", "arguments"),
		"status_tool": Schema{"type": "string"},
		"timestamp":   timestampSchema("When the answer was made."),
		"permission":  permissionSchema("Why nothing was started."),
		"reason":      Schema{"type": "string"},
		"warnings":    stringArray("Things the caller should know (a clamped target)."),
		"device_id":   Schema{"type": "string"},
	}, "status", "operation_id", "idempotency_key", "target_value", "previous_value", "expected_completion", "deadline", "side_effects", "compensable", "compensation_hint", "timestamp")
}

// StatusInputSchema is the input of read_status_*.
func StatusInputSchema() Schema {
	s := object(Schema{
		"operation_id": Schema{"type": "string", "minLength": 1, "description": "The id start_* answered."},
		"wait_ms": Schema{"type": "integer", "minimum": 0, "maximum": MaxWaitMs,
			"description": "Answer when the operation ends or after this long, whichever comes first; meanwhile progress notifications go to a client that sent a progressToken. 0 (default) answers at once."},
	}, "operation_id")
	s["additionalProperties"] = false
	return s
}

// StatusOutputSchema is the response of read_status_<o.Name>.
func StatusOutputSchema(o *manifest.Operation) Schema {
	observed := o.Target
	if o.Move != nil && o.Move.Source != nil {
		observed = o.Move.Source
	}
	return object(Schema{
		"value":        nullableValue(observed, "The observed value of "+observedTool(o)+" now; null when quality is error"),
		"unit":         unitSchema(observed),
		"timestamp":    timestampSchema("When the observed value was measured, RFC 3339 UTC."),
		"quality":      Schema{"type": "string", "enum": qualities, "description": "Quality of the observed value, as for read_*."},
		"operation_id": Schema{"type": "string"},
		"state": Schema{"type": "string", "enum": opStates,
			"description": "running; succeeded; failed (see reason: a refused step, a timeout, a restart or the safe state); cancelled (by " + o.CancelTool() + "); unknown (no such operation)."},
		"progress":            Schema{"type": "number", "minimum": 0, "maximum": 1, "description": "How far the operation has come, 0..1; never decreases."},
		"target_value":        nullableValue(o.Target, "What the operation drives the point to"),
		"last_written":        nullableValue(o.Target, "The last value the operation wrote"),
		"writes":              Schema{"type": "integer", "minimum": 0, "description": "How many writes the operation made."},
		"started_at":          nullableTimestamp("When it started."),
		"updated_at":          nullableTimestamp("When it last changed."),
		"expected_completion": nullableTimestamp("When it should end."),
		"deadline":            nullableTimestamp("When it is ended as failed if still running."),
		"ended_at":            nullableTimestamp("When it ended; null while running."),
		"reason":              Schema{"type": "string", "description": "Why it failed or was cancelled."},
		"observed":            Schema{"type": "string", "description": "The tool whose value is reported."},
		"warnings":            stringArray("Things the caller should know."),
		"device_id":           Schema{"type": "string"},
		"detail":              Schema{"type": "string", "description": "Why quality is not good."},
	}, "value", "unit", "timestamp", "quality", "operation_id", "state", "progress", "started_at", "updated_at", "expected_completion", "deadline", "ended_at")
}

func observedTool(o *manifest.Operation) string {
	if o.Move != nil {
		return "read_" + o.Move.Until
	}
	return o.Target.ToolName()
}

// CancelInputSchema is the input of do_cancel_*.
func CancelInputSchema() Schema {
	s := object(Schema{
		"operation_id":    Schema{"type": "string", "minLength": 1, "description": "The id start_* answered."},
		"idempotency_key": idempotencyKeySchema("Identifies this cancellation; a retry with the same key answers the first outcome without writing again. Generated (and returned) if absent."),
	}, "operation_id")
	s["additionalProperties"] = false
	return s
}

// CancelOutputSchema is the response of do_cancel_<o.Name>: a do_* body for
// the safe-value write of its point, and the operation's state.
func CancelOutputSchema(o *manifest.Operation) Schema {
	s := DoOutputSchema(o.Target)
	props := s["properties"].(Schema)
	props["operation_id"] = Schema{"type": "string"}
	props["state"] = Schema{"type": "string", "enum": opStates, "description": "The operation's state after the call."}
	return s
}

// SequenceInputSchema is the input of a sequence's do_*: only its key,
// from which every step's key is derived.
func SequenceInputSchema() Schema {
	s := object(Schema{
		"idempotency_key": idempotencyKeySchema("Identifies this run of the sequence. Each step's key is derived from it, so a retry with the same key acts at most once per step and returns the first outcome. Generated (and returned) if absent."),
	})
	s["additionalProperties"] = false
	return s
}

// SequenceOutputSchema is the response of a sequence's do_*.
func SequenceOutputSchema() Schema {
	step := object(Schema{
		"step":            Schema{"type": "integer", "minimum": 1},
		"tool":            Schema{"type": "string"},
		"arguments":       Schema{"type": "object"},
		"idempotency_key": Schema{"type": "string"},
		"status": Schema{"type": "string", "enum": []any{string(StatusSuccess), string(StatusPartial), string(StatusFailed), string(OpRunning), string(OpSucceeded), "skipped"},
			"description": "The step's (or compensation's) outcome."},
		"permission":     permissionSchema("Why it failed."),
		"reason":         Schema{"type": "string"},
		"operation_id":   Schema{"type": "string"},
		"applied_value":  Schema{"description": "The value the step left, null when none."},
		"previous_value": Schema{"description": "The value before the step, null when unknown."},
	}, "step", "tool", "arguments", "idempotency_key", "status", "applied_value", "previous_value")
	s := object(Schema{
		"status": Schema{"type": "string", "enum": statuses,
			"description": "success: every step acted; failed: a step failed (failed_step) and the steps before it were compensated in reverse order (see outcome)."},
		"idempotency_key":   Schema{"type": "string"},
		"applied_value":     Schema{"type": "null", "description": "A sequence sets no single value; see steps."},
		"previous_value":    Schema{"type": "null", "description": "A sequence sets no single value; see steps."},
		"side_effects":      stringArray("What the steps that acted changed."),
		"compensable":       Schema{"type": "boolean"},
		"compensation_hint": Schema{"type": []any{"string", "null"}, "description": "The calls that undo the sequence, in order."},
		"timestamp":         timestampSchema("When the sequence ended."),
		"permission":        permissionSchema("Why the failed step failed."),
		"reason":            Schema{"type": "string"},
		"warnings":          stringArray("Things the caller should know."),
		"device_id":         Schema{"type": "string"},
		"outcome": Schema{"type": "string", "enum": []any{SequenceCompleted, SequenceCompensated, SequenceCompensationFailed},
			"description": "completed: every step acted; compensated: a step failed and every step before it was undone; compensation_failed: an undo failed too, so the device is left between states (see compensations)."},
		"failed_step":   Schema{"type": []any{"integer", "null"}, "minimum": 1},
		"steps":         Schema{"type": "array", "items": step},
		"compensations": Schema{"type": "array", "items": step, "description": "Undo calls made, in the order made (reverse step order)."},
	}, "status", "idempotency_key", "applied_value", "previous_value", "side_effects", "compensable", "compensation_hint", "timestamp", "outcome", "failed_step", "steps", "compensations")
	return s
}
