package mcpcore

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// operationTool describes the tools of start and sequence operations
// (docs/roadmap.md).
func operationTool(t engine.Tool) (in, out promcp.Schema, title, desc string, ann Annotations) {
	o := t.Operation
	switch t.Kind {
	case engine.ToolStart:
		title = "Start " + words(o.Name)
		return promcp.StartInputSchema(o), promcp.StartOutputSchema(o), title, startDescription(o), annotations(title, false, false)
	case engine.ToolStatus:
		title = "Follow " + words(o.Name)
		return promcp.StatusInputSchema(), promcp.StatusOutputSchema(o), title, statusDescription(o), annotations(title, true, false)
	case engine.ToolCancel:
		title = "Cancel " + words(o.Name)
		return promcp.CancelInputSchema(), promcp.CancelOutputSchema(o), title, cancelDescription(o), annotations(title, false, false)
	default:
		title = "Run the sequence " + words(o.Name)
		return promcp.SequenceInputSchema(), promcp.SequenceOutputSchema(), title, sequenceDescription(o), annotations(title, false, !sequenceCompensable(o))
	}
}

func streamDescription(c *manifest.Capability) string {
	pace := fmt.Sprintf("at most one update every %d ms", c.MinUpdateInterval().Milliseconds())
	if c.IsNumeric() {
		pace += fmt.Sprintf(", and none for a change of %s%s or less", promcp.Number(c.ChangeDeadband()), unitClause(c))
	}
	return fmt.Sprintf("Subscribes this session to read_%s's reading: answers the resource URI, the pace and the first reading, and the values then arrive as notifications/resources/updated (the reading in _meta), %s (interval_ms and deadband may ask for less, never more)."+
		" Observation only, no side effects. resources/unsubscribe with the URI, or the end of the session, ends it.", c.Name, pace)
}

func startDescription(o *manifest.Operation) string {
	var b strings.Builder
	b.WriteString(sentence(o.Description))
	t := o.Target
	switch {
	case o.Ramp != nil:
		fmt.Fprintf(&b, " Ramps %s to value%s at most %s%s per minute, one write every %d ms.", t.ToolName(), unitClause(t), promcp.Number(o.Ramp.RatePerMinute), unitClause(t), o.Ramp.StepMs)
	case o.Run != nil:
		then := "its safe value"
		if o.Run.Then != nil {
			then = fmt.Sprint(o.Run.Then)
		}
		fmt.Fprintf(&b, " Sets %s to value for duration_ms (at most %d), then to %s.", t.ToolName(), o.Run.MaxDurationMs, then)
	case o.Move != nil:
		fmt.Fprintf(&b, " Sets %s to value once and is done when read_%s is within %s of it.", t.ToolName(), o.Move.Until, promcp.Number(o.Move.Tolerance))
	}
	if len(o.SideEffects) > 0 {
		fmt.Fprintf(&b, " Side effects: %s.", strings.Join(o.SideEffects, ", "))
	}
	fmt.Fprintf(&b, " Answers at once with operation_id, status running and the expected completion; follow it with %s and stop it with %s (which drives %s to its safe value)."+
		" Every write is an ordinary %s with all its checks (range, guards, cooldown, rate limits, interlocks), and a refused write ends the operation as failed."+
		" Retries with the same idempotency_key answer the first start and start nothing.", o.StatusTool(), o.CancelTool(), t.ToolName(), t.ToolName())
	return b.String()
}

func statusDescription(o *manifest.Operation) string {
	return fmt.Sprintf("Observes an operation of %s by its operation_id: state (running, succeeded, failed, cancelled), progress 0..1, the value of the observed point with its quality, and timestamps."+
		" Observation only, no side effects; safe to call in parallel. With wait_ms (at most %d) it answers when the operation ends or the wait passes; meanwhile a client that gave a progressToken gets progress notifications.",
		o.StartTool(), promcp.MaxWaitMs)
}

func cancelDescription(o *manifest.Operation) string {
	safe, _ := o.Target.SafeValueOf()
	return fmt.Sprintf("Cancels an operation of %s by its operation_id: no write of it follows, and %s is driven to its safe value %v at once (like the safe state, without waiting for a cooldown)."+
		" For an operation that has ended it only drives the safe value, which undoes it. Retries with the same idempotency_key are safe.", o.StartTool(), o.Target.ToolName(), safe)
}

func sequenceDescription(o *manifest.Operation) string {
	var b strings.Builder
	b.WriteString(sentence(o.Description))
	b.WriteString(" Steps, in order:")
	for i, s := range o.Steps {
		fmt.Fprintf(&b, " %d. %s value=%v", i+1, s.Tool, s.Value)
		if s.DurationMs > 0 {
			fmt.Fprintf(&b, " duration_ms=%d", s.DurationMs)
		}
		b.WriteString(";")
	}
	b.WriteString(" If a step fails, the steps before it (and the failed one, when it may have acted all the same) are undone in reverse order, and the answer reports every step and every undo." +
		" Each step has all the checks of its own tool. Retries with the same idempotency_key act at most once per step and answer the first outcome.")
	return b.String()
}

// sequenceCompensable: every step can be undone.
func sequenceCompensable(o *manifest.Operation) bool {
	for _, s := range o.Steps {
		if s.Compensate == nil && s.Do != nil && !compensable(s.Do) {
			return false
		}
	}
	return true
}

// StartRequest reads start_* arguments; problem says what is wrong with them.
func StartRequest(args map[string]any) (req promcp.StartRequest, problem string) {
	if problem = onlyKeys(args, "value", "duration_ms", "idempotency_key"); problem != "" {
		return req, problem
	}
	req.Value = args["value"]
	if d, ok := args["duration_ms"]; ok {
		f, isNum := d.(float64)
		if !isNum || f != float64(int(f)) {
			return req, "duration_ms must be a whole number of milliseconds"
		}
		req.DurationMs = int(f)
	}
	req.IdempotencyKey, problem = stringArg(args, "idempotency_key")
	return req, problem
}

// StatusRequest reads read_status_* arguments.
func StatusRequest(args map[string]any) (req promcp.StatusRequest, problem string) {
	if problem = onlyKeys(args, "operation_id", "wait_ms"); problem != "" {
		return req, problem
	}
	if req.OperationID, problem = stringArg(args, "operation_id"); problem == "" && req.OperationID == "" {
		problem = "operation_id is required"
	}
	if w, ok := args["wait_ms"]; ok && problem == "" {
		f, isNum := w.(float64)
		if !isNum || f < 0 || f > promcp.MaxWaitMs || f != float64(int(f)) {
			return req, fmt.Sprintf("wait_ms must be a whole number 0..%d", promcp.MaxWaitMs)
		}
		req.WaitMs = int(f)
	}
	return req, problem
}

// CancelRequest reads do_cancel_* arguments.
func CancelRequest(args map[string]any) (req promcp.CancelRequest, problem string) {
	if problem = onlyKeys(args, "operation_id", "idempotency_key"); problem != "" {
		return req, problem
	}
	if req.OperationID, problem = stringArg(args, "operation_id"); problem == "" && req.OperationID == "" {
		problem = "operation_id is required"
	}
	if problem == "" {
		req.IdempotencyKey, problem = stringArg(args, "idempotency_key")
	}
	return req, problem
}

// SequenceRequest reads a sequence's do_* arguments.
func SequenceRequest(args map[string]any) (req promcp.SequenceRequest, problem string) {
	if problem = onlyKeys(args, "idempotency_key"); problem != "" {
		return req, problem
	}
	req.IdempotencyKey, problem = stringArg(args, "idempotency_key")
	return req, problem
}

func onlyKeys(args map[string]any, allowed ...string) string {
	var unknown []string
	for _, k := range slices.Sorted(maps.Keys(args)) {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		return fmt.Sprintf("unknown argument %s: the tool takes %s", strings.Join(unknown, ", "), strings.Join(allowed, ", "))
	}
	return ""
}

func stringArg(args map[string]any, key string) (string, string) {
	v, ok := args[key]
	if !ok {
		return "", ""
	}
	s, isString := v.(string)
	if !isString {
		return "", key + " must be a string"
	}
	return s, ""
}
