package manifest

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/physmcp/physmcpd/internal/strictyaml"
)

// Operations are capabilities that are not bound to a point of their own:
// kind start (a long action on a do capability, proMCP roadmap v0.3) and kind
// sequence (a saga of do_*/start_* steps with compensations, v0.5). They are
// written in the capabilities list like any other, and kept apart from the
// bound ones (Manifest.Operations), so every part of physmcpd that walks the
// points (drivers, simulators, can_do, profiles) sees only read and do.
const (
	KindStart    Kind = "start"
	KindSequence Kind = "sequence"
)

// Operation is a capability of kind start or sequence.
type Operation struct {
	Name               string   `yaml:"name,required"`
	Kind               Kind     `yaml:"kind,required"`
	Description        string   `yaml:"description,required"`
	SemanticTags       []string `yaml:"semantic_tags,required"`
	SideEffects        []string `yaml:"side_effects"`
	RequiresPermission Role     `yaml:"requires_permission"`
	Group              string   `yaml:"group"`

	// Drives names the do capability a start operation acts on: each of its
	// writes is an ordinary write of that capability (its range, guards,
	// limits, interlocks, idempotency and audit), and cancelling drives it to
	// its safe value.
	Drives string `yaml:"drives"`
	// Exactly one of Ramp, Run and Move says what a start operation does.
	Ramp *Ramp `yaml:"ramp"`
	Run  *Run  `yaml:"run"`
	Move *Move `yaml:"move"`
	// TimeoutMs ends a running operation as failed; defaults per shape (Timeout).
	TimeoutMs int `yaml:"timeout_ms"`

	// Steps are a sequence's actions, in order.
	Steps []*Step `yaml:"steps"`

	// Target is the capability Drives resolves to (set by validation).
	Target *Capability `yaml:"-"`

	At Positions `yaml:"-"`
}

// Ramp moves the driven capability to the requested value in steps of at
// most RatePerMinute·StepMs/60000, one write every StepMs.
type Ramp struct {
	RatePerMinute float64 `yaml:"rate_per_minute,required"`
	StepMs        int     `yaml:"step_ms,required"`

	At Positions `yaml:"-"`
}

// Step is the largest change one write of the ramp makes.
func (r *Ramp) Step() float64 { return r.RatePerMinute * float64(r.StepMs) / 60000 }

// Run writes the requested value, holds it for the requested duration (at
// most MaxDurationMs) and then writes Then (default: the safe value).
type Run struct {
	MaxDurationMs int `yaml:"max_duration_ms,required"`
	Then          any `yaml:"then"`

	At Positions `yaml:"-"`
}

// Move writes the requested value once and is done when the read capability
// Until reads within Tolerance of it (a valve's position following its command).
type Move struct {
	Until     string  `yaml:"until,required"`
	Tolerance float64 `yaml:"tolerance,required"`
	PollMs    int     `yaml:"poll_ms"`

	// Source is the read capability Until resolves to (set by validation).
	Source *Capability `yaml:"-"`

	At Positions `yaml:"-"`
}

// Poll is poll_ms with its default of 500 ms.
func (m *Move) Poll() int {
	if m.PollMs == 0 {
		return 500
	}
	return m.PollMs
}

// Step is one action of a sequence: a do_* or start_* tool of this device
// with its arguments, and how to undo it.
type Step struct {
	Tool  string `yaml:"tool,required"`
	Value any    `yaml:"value,required"`
	// DurationMs is the duration argument of a start_* of shape run.
	DurationMs int `yaml:"duration_ms"`
	// Wait makes a start_* step complete when its operation has succeeded,
	// not when it has started.
	Wait bool `yaml:"wait"`
	// Compensate undoes the step; by default a do_* step writes the previous
	// value back (its own compensation) and a start_* step is cancelled.
	Compensate *StepCall `yaml:"compensate"`
	// Device is where the tool runs; only this device until the mesh exists.
	Device string `yaml:"device"`

	// Do and Start are the capability or operation Tool resolves to (set by validation).
	Do    *Capability `yaml:"-"`
	Start *Operation  `yaml:"-"`

	At Positions `yaml:"-"`
}

// StepCall is a do_* call of this device.
type StepCall struct {
	Tool  string `yaml:"tool,required"`
	Value any    `yaml:"value,required"`

	Do *Capability `yaml:"-"`

	At Positions `yaml:"-"`
}

// Tool names of operations.

// StartTool is start_<name>.
func (o *Operation) StartTool() string { return "start_" + o.Name }

// StatusTool is read_status_<name>.
func (o *Operation) StatusTool() string { return "read_status_" + o.Name }

// CancelTool is do_cancel_<name>.
func (o *Operation) CancelTool() string { return "do_cancel_" + o.Name }

// SequenceTool is do_<name>.
func (o *Operation) SequenceTool() string { return "do_" + o.Name }

// ToolNames are the tools the operation becomes.
func (o *Operation) ToolNames() []string {
	if o.Kind == KindSequence {
		return []string{o.SequenceTool()}
	}
	return []string{o.StartTool(), o.StatusTool(), o.CancelTool()}
}

// Shape is ramp, run or move for a start operation.
func (o *Operation) Shape() string {
	switch {
	case o.Ramp != nil:
		return "ramp"
	case o.Run != nil:
		return "run"
	case o.Move != nil:
		return "move"
	}
	return ""
}

// splitOperations takes the capabilities of kind start and sequence out of
// the document's capabilities list, so the list decodes as bound
// capabilities, and decodes them as operations.
func splitOperations(d *strictyaml.Decoder, root *yaml.Node, m *Manifest) {
	doc := root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value != "capabilities" || doc.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		list := doc.Content[i+1]
		kept := list.Content[:0:0]
		for j, item := range list.Content {
			if !isOperation(item) {
				kept = append(kept, item)
				continue
			}
			op := &Operation{}
			d.Decode(item, op, fmt.Sprintf("capabilities[%d]", j))
			m.Operations = append(m.Operations, op)
		}
		list.Content = kept
	}
}

func isOperation(n *yaml.Node) bool {
	if n.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "kind" {
			k := Kind(n.Content[i+1].Value)
			return k == KindStart || k == KindSequence
		}
	}
	return false
}

// Operation returns the operation that serves tool, or nil.
func (m *Manifest) Operation(tool string) *Operation {
	if m == nil {
		return nil
	}
	for _, o := range m.Operations {
		if slices.Contains(o.ToolNames(), tool) {
			return o
		}
	}
	return nil
}

// operations checks every operation once the capabilities are known.
func (v *validator) operations() {
	tools := map[string]string{}
	for _, c := range v.m.Capabilities {
		tools[c.ToolName()] = "the capability " + c.Name
	}
	for _, o := range v.m.Operations {
		for _, t := range o.ToolNames() {
			if first, dup := tools[t]; dup && nameGrammar.MatchString(o.Name) {
				v.errorf(o.At.Of("name"), "capabilities."+o.Name+".name", "tool %s is already defined by %s", t, first)
			}
			tools[t] = "the " + string(o.Kind) + " operation " + o.Name
		}
	}
	for _, o := range v.m.Operations {
		path := "capabilities." + o.Name
		v.operationCommon(path, o)
		switch o.Kind {
		case KindStart:
			v.start(path, o)
		case KindSequence:
			v.sequence(path, o)
		}
	}
}

func (v *validator) operationCommon(path string, o *Operation) {
	at := o.At
	if o.Name != "" {
		longest := slices.MaxFunc(o.ToolNames(), func(a, b string) int { return len(a) - len(b) })
		switch {
		case !nameGrammar.MatchString(o.Name):
			v.errorf(at.Of("name"), path+".name", "%q must be lowercase letters, digits and _ and start with a letter", o.Name)
		case len(longest) > maxToolName:
			v.errorf(at.Of("name"), path+".name", "tool name %s is %d characters; the limit is %d", longest, len(longest), maxToolName)
		}
	}
	if at.Has("description") && strings.TrimSpace(o.Description) == "" {
		v.errorf(at.Of("description"), path+".description", "must not be empty; agents choose tools by their descriptions")
	}
	if at.Has("semantic_tags") && len(o.SemanticTags) == 0 {
		v.errorf(at.Of("semantic_tags"), path+".semantic_tags", "needs at least one tag")
	}
	for j, t := range o.SemanticTags {
		if !tagGrammar.MatchString(t) {
			v.errorf(at.Of("semantic_tags"), fmt.Sprintf("%s.semantic_tags[%d]", path, j), "tag %q must be lowercase letters, digits, _ and - and start with a letter", t)
		}
	}
	if o.RequiresPermission != "" && !ValidRole(o.RequiresPermission) {
		v.errorf(at.Of("requires_permission"), path+".requires_permission", "unknown role %q; expected one of %s", o.RequiresPermission, RoleNames())
	}
	if at.Has("group") && !nameGrammar.MatchString(o.Group) {
		v.errorf(at.Of("group"), path+".group", "%q must be lowercase letters, digits and _ and start with a letter", o.Group)
	}
	if o.TimeoutMs < 0 {
		v.errorf(at.Of("timeout_ms"), path+".timeout_ms", "must not be negative, got %d", o.TimeoutMs)
	}
	only := func(kind Kind, keys ...string) {
		if o.Kind == kind {
			return
		}
		for _, k := range keys {
			if at.Has(k) {
				v.errorf(at.Of(k), path+"."+k, "only applies to kind %s", kind)
			}
		}
	}
	only(KindStart, "drives", "ramp", "run", "move", "timeout_ms")
	only(KindSequence, "steps")
}

// doCapability resolves a do capability by name or tool name.
func (v *validator) doCapability(ref string) *Capability {
	for _, c := range v.m.Capabilities {
		if c.Kind == KindDo && (c.Name == ref || c.ToolName() == ref) {
			return c
		}
	}
	return nil
}

func (v *validator) start(path string, o *Operation) {
	at := o.At
	if !at.Has("drives") {
		v.errorf(at.Self, path, "a start operation needs drives: the do capability it acts on")
	} else if o.Target = v.doCapability(o.Drives); o.Target == nil {
		v.errorf(at.Of("drives"), path+".drives", "no do capability named %q", o.Drives)
	}
	n := 0
	for _, k := range []string{"ramp", "run", "move"} {
		if at.Has(k) {
			n++
		}
	}
	if n != 1 {
		v.errorf(at.Self, path, "give exactly one of ramp, run and move")
		return
	}
	t := o.Target
	if t == nil {
		return
	}
	if _, ok := safeValueOf(t); !ok {
		v.errorf(at.Of("drives"), path+".drives", "%s has no safe_value (or GPIO safe_level): do_cancel_%s drives it there, and a restart during the operation ends there", t.ToolName(), o.Name)
	}
	if t.Compensable != nil && !*t.Compensable && o.Ramp != nil {
		v.errorf(at.Of("drives"), path+".drives", "%s is not compensable (compensable: false); a ramp writes it many times", t.ToolName())
	}
	switch {
	case o.Ramp != nil:
		r := o.Ramp
		if !t.IsNumeric() {
			v.errorf(at.Of("ramp"), path+".ramp", "a ramp needs a numeric capability; %s is %s", t.ToolName(), t.DataType)
		}
		if !(r.RatePerMinute > 0) || math.IsInf(r.RatePerMinute, 0) {
			v.errorf(r.At.Of("rate_per_minute"), path+".ramp.rate_per_minute", "must be a positive number, got %g", r.RatePerMinute)
		}
		v.stepInterval(r.At, path+".ramp", "step_ms", r.StepMs, t)
	case o.Run != nil:
		r := o.Run
		if r.MaxDurationMs < 1 {
			v.errorf(r.At.Of("max_duration_ms"), path+".run.max_duration_ms", "must be at least 1, got %d", r.MaxDurationMs)
		}
		if r.Then != nil {
			if msg := t.checkValue(r.Then); msg != "" {
				v.errorf(r.At.Of("then"), path+".run.then", "%s (then is a value of %s)", msg, t.ToolName())
			}
		}
	case o.Move != nil:
		mv := o.Move
		for _, c := range v.m.Capabilities {
			if c.Kind == KindRead && (c.Name == mv.Until || c.ToolName() == mv.Until) {
				mv.Source = c
			}
		}
		switch {
		case mv.Source == nil:
			v.errorf(mv.At.Of("until"), path+".move.until", "no read capability named %q", mv.Until)
		case !mv.Source.IsNumeric() || !t.IsNumeric():
			v.errorf(mv.At.Of("until"), path+".move.until", "a move compares numbers: %s and %s must both be float or int", t.ToolName(), mv.Source.ToolName())
		}
		if mv.Tolerance < 0 || math.IsNaN(mv.Tolerance) {
			v.errorf(mv.At.Of("tolerance"), path+".move.tolerance", "must not be negative, got %g", mv.Tolerance)
		}
		if mv.At.Has("poll_ms") && mv.PollMs < 10 {
			v.errorf(mv.At.Of("poll_ms"), path+".move.poll_ms", "must be at least 10, got %d", mv.PollMs)
		}
		if o.TimeoutMs == 0 {
			v.errorf(at.Self, path+".timeout_ms", "a move needs timeout_ms: how long the reading may take to arrive before the operation fails")
		}
	}
}

// stepInterval checks that writes every ms milliseconds fit the driven
// capability's cooldown and rate limit: each step is an ordinary write, and
// a ramp whose steps the limits refuse would always fail.
func (v *validator) stepInterval(at Positions, path, key string, ms int, t *Capability) {
	switch {
	case ms < 10:
		v.errorf(at.Of(key), path+"."+key, "must be at least 10 ms, got %d", ms)
	case ms < t.CooldownMs:
		v.errorf(at.Of(key), path+"."+key, "%d ms is shorter than %s's cooldown_ms %d: every other step would be refused", ms, t.ToolName(), t.CooldownMs)
	case t.RateLimit != nil && float64(t.RateLimit.Per.Milliseconds())/float64(ms) > float64(t.RateLimit.Count):
		v.errorf(at.Of(key), path+"."+key, "a write every %d ms exceeds %s's rate_limit %s", ms, t.ToolName(), t.RateLimit.Text)
	}
}

func (v *validator) sequence(path string, o *Operation) {
	if len(o.Steps) == 0 {
		v.errorf(o.At.Of("steps"), path+".steps", "a sequence needs at least one step")
		return
	}
	for i, s := range o.Steps {
		sp := fmt.Sprintf("%s.steps[%d]", path, i)
		if s.Device != "" && s.Device != v.m.Device.ID {
			v.errorf(s.At.Of("device"), sp+".device", "steps on another device (%q) need the mesh, which this release of physmcpd does not have; a sequence acts on %s only", s.Device, v.m.Device.ID)
			continue
		}
		switch {
		case strings.HasPrefix(s.Tool, "start_"):
			s.Start = v.m.Operation(s.Tool)
			if s.Start == nil || s.Start.Kind != KindStart || s.Start.StartTool() != s.Tool {
				v.errorf(s.At.Of("tool"), sp+".tool", "no start operation serves %s", s.Tool)
				continue
			}
			if s.Start.Target != nil {
				if msg := s.Start.Target.checkValue(s.Value); msg != "" {
					v.errorf(s.At.Of("value"), sp+".value", "%s", msg)
				}
			}
			if s.Start.Run == nil && s.At.Has("duration_ms") {
				v.errorf(s.At.Of("duration_ms"), sp+".duration_ms", "only applies to a start operation of shape run")
			}
			if s.Start.Run != nil && (s.DurationMs < 1 || s.DurationMs > s.Start.Run.MaxDurationMs) {
				v.errorf(s.At.Of("duration_ms"), sp+".duration_ms", "a run step needs duration_ms within 1..%d, got %d", s.Start.Run.MaxDurationMs, s.DurationMs)
			}
		case strings.HasPrefix(s.Tool, "do_"):
			if s.Do = v.doCapability(s.Tool); s.Do == nil || s.Do.ToolName() != s.Tool {
				v.errorf(s.At.Of("tool"), sp+".tool", "no do capability serves %s (steps are this device's do_* and start_* tools)", s.Tool)
				continue
			}
			if msg := s.Do.checkValue(s.Value); msg != "" {
				v.errorf(s.At.Of("value"), sp+".value", "%s", msg)
			}
			for _, k := range []string{"wait", "duration_ms"} {
				if s.At.Has(k) {
					v.errorf(s.At.Of(k), sp+"."+k, "only applies to a start_* step")
				}
			}
			if s.Compensate == nil && s.Do.Compensable != nil && !*s.Do.Compensable && i < len(o.Steps)-1 {
				v.errorf(s.At.Of("tool"), sp+".tool", "%s cannot be undone (compensable: false), so it can only be the last step, or give compensate", s.Tool)
			}
		default:
			v.errorf(s.At.Of("tool"), sp+".tool", "%q is not a do_* or start_* tool of this device", s.Tool)
			continue
		}
		if c := s.Compensate; c != nil {
			if c.Do = v.doCapability(c.Tool); c.Do == nil || c.Do.ToolName() != c.Tool {
				v.errorf(c.At.Of("tool"), sp+".compensate.tool", "no do capability serves %s", c.Tool)
			} else if msg := c.Do.checkValue(c.Value); msg != "" {
				v.errorf(c.At.Of("value"), sp+".compensate.value", "%s", msg)
			}
		}
	}
}

// safeValueOf mirrors the engine's safe value: safe_value, else a GPIO
// output's safe_level.
func safeValueOf(c *Capability) (any, bool) {
	if c.SafeValue != nil {
		return c.SafeValue, true
	}
	if g := c.Binding.GPIO; g != nil && g.SafeLevel != nil && c.DataType == TypeBool {
		return *g.SafeLevel != g.ActiveLow, true
	}
	return nil, false
}

// SafeValueOf is the value the capability is driven to by the safe state and
// by cancelling an operation on it.
func (c *Capability) SafeValueOf() (any, bool) { return safeValueOf(c) }
