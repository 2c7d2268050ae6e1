package adopt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

// point is one adopted capability.
type point struct {
	bus  *Bus
	c    *manifest.Capability
	b    *manifest.VirtualBinding
	now  func() time.Time
	desc string

	// failing is when the current run of failed reads began (nil after a
	// read that gave a value): a source that answers quality error is
	// reachable but gives no value either.
	failing atomic.Pointer[time.Time]
}

// BindVirtual binds an adopted capability: reads call its tool (a do
// capability's read_tool), writes its do_ tool.
func (b *Bus) BindVirtual(c *manifest.Capability, opt drivers.BindOptions) (drivers.Point, error) {
	if c.Binding.Virtual == nil {
		return nil, fmt.Errorf("capability %s has no virtual binding", c.Name)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &point{bus: b, c: c, b: c.Binding.Virtual, now: opt.Now,
		desc: fmt.Sprintf("%s (%s) tool %s", c.Binding.Bus, b.Describe(), c.Binding.Virtual.Tool)}, nil
}

func (p *point) Describe() string { return p.desc }

// Quantise leaves the value as it is: the source encodes it, and the
// engine's read-back compares within the capability's precision.
func (p *point) Quantise(v drivers.Value) (drivers.Value, error) { return v, nil }

// Read calls the source's read_* and keeps its quality, measurement time
// and device. A source that answers with quality error is Declined (alive,
// without a value), so the engine serves its own last good value as stale,
// for one cache TTL from the first read without a value (OutFor).
func (p *point) Read(ctx context.Context) (s drivers.Sample, err error) {
	defer func() { p.noteRead(err) }()
	tool := p.b.Tool
	if p.c.Kind == manifest.KindDo {
		tool = p.b.ReadTool
	}
	out, _, err := p.bus.call(ctx, tool, map[string]any{})
	if err != nil {
		return drivers.Sample{}, err
	}
	quality, _ := out["quality"].(string)
	detail, _ := out["detail"].(string)
	s = drivers.Sample{At: p.now()}
	if ts, ok := out["timestamp"].(string); ok {
		// The source's measurement time, unless its clock is ahead of
		// ours: a reading from the future would count as fresh in the cache
		// for as long as the clocks disagree.
		if at, err := time.Parse(time.RFC3339Nano, ts); err == nil && !at.After(s.At) {
			s.At = at
		}
	}
	if src, ok := out["source"].(string); ok && src != "" {
		s.Source = src
	} else if id, ok := out["device_id"].(string); ok {
		s.Source = id
	}
	switch quality {
	case "good", "stale", "degraded":
	case "error":
		return drivers.Sample{}, &drivers.Declined{Reason: orElse(detail, "the source reports quality error")}
	default:
		return drivers.Sample{}, fmt.Errorf("%s %s: the answer has no proMCP quality (%q)", p.bus.Describe(), tool, quality)
	}
	v, err := p.value(out["value"])
	if err != nil {
		return drivers.Sample{}, fmt.Errorf("%s %s: %w", p.bus.Describe(), tool, err)
	}
	s.Value = v
	switch quality {
	case "degraded":
		s.Flag = orElse(detail, "the source reports the value as degraded")
		s.Value = nil
	case "stale":
		s.Stale = "the source serves its last good value: " + orElse(detail, "its live read failed")
	}
	return s, nil
}

func (p *point) noteRead(err error) {
	if err == nil {
		p.failing.Store(nil)
		return
	}
	now := time.Now()
	p.failing.CompareAndSwap(nil, &now)
}

// OutFor is how long the source has given this capability no value: since
// the bus lost the source or the first of the reads that failed in a row,
// whichever came first (drivers.Outage).
func (p *point) OutFor() (time.Duration, bool) {
	d, out := p.bus.lostFor()
	if at := p.failing.Load(); at != nil {
		d, out = max(d, time.Since(*at)), true
	}
	return d, out
}

// value converts a JSON value to the capability's type as the engine holds
// values: float64, int64, bool or string.
func (p *point) value(v any) (drivers.Value, error) {
	switch p.c.DataType {
	case manifest.TypeFloat:
		if f, ok := v.(float64); ok {
			return f, nil
		}
	case manifest.TypeInt:
		if f, ok := v.(float64); ok && f == math.Trunc(f) {
			return int64(f), nil
		}
	case manifest.TypeBool:
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case manifest.TypeString, manifest.TypeEnum:
		if s, ok := v.(string); ok {
			return s, nil
		}
	}
	if v == nil {
		return nil, errors.New("the source answered without a value")
	}
	return nil, fmt.Errorf("the source's value %v (%T) is not a %s", v, v, p.c.DataType)
}

// Write calls the source's do_ tool with the caller's idempotency key, so a
// write the engine retries (to settle one whose outcome was lost) is never
// applied twice at the source: the source returns its first outcome.
//
// The outcome maps onto the engine's write contract: success or partial is
// applied; a refusal by the source's own checks is Declined (nothing
// written; policy_denied when the source names no permission); everything
// else may have acted and is ErrInDoubt: no answer, a broken answer, and
// the source's own source_unreachable, which it gives both for "could not
// read, nothing written" and for its own in-doubt writes and which cannot
// be told apart from here.
func (p *point) Write(ctx context.Context, v drivers.Value) error {
	if p.c.Kind != manifest.KindDo {
		return drivers.ErrNotWritable
	}
	key := drivers.IdempotencyKey(ctx)
	if key == "" {
		return errors.New("no idempotency key to pass to the source; an adopted write needs one")
	}
	out, sent, err := p.bus.call(ctx, p.b.Tool, map[string]any{"value": v, "idempotency_key": key})
	if err != nil {
		if sent {
			return fmt.Errorf("%w: %w", drivers.ErrInDoubt, err)
		}
		return err
	}
	status, _ := out["status"].(string)
	perm, _ := out["permission"].(string)
	reason, _ := out["reason"].(string)
	switch {
	case status == "success" || status == "partial":
		return nil
	case status == "failed" && perm == "":
		// physmcpd answers so what it refused before writing (a key reused
		// for another value, an invalid request): nothing was written
		return &drivers.Declined{Permission: "policy_denied", Reason: "the source refused without naming a permission: " + reason}
	case status == "failed" && perm != "source_unreachable":
		return &drivers.Declined{Permission: perm, Reason: reason}
	}
	return fmt.Errorf("%w: %s %s answered status %q (%s): %s", drivers.ErrInDoubt, p.bus.Describe(), p.b.Tool, status, orElse(perm, "no permission"), reason)
}

func orElse(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

func jsonObject(text string, m *map[string]any) error { return json.Unmarshal([]byte(text), m) }

// Assess asks the source's can_do about writing v (any value when v is
// nil), scoped to the adopted tool: what it answers for the tool is its
// verdict; no entry for the tool is no opinion.
func (p *point) Assess(ctx context.Context, v drivers.Value) (permission, reason string, err error) {
	if p.c.Kind != manifest.KindDo {
		return "", "", nil
	}
	intent := map[string]any{"semantic_tags": strings.Split(strings.TrimPrefix(p.b.Tool, "do_"), "_"), "action": "set"}
	if v != nil {
		intent["value"] = v
	}
	out, _, err := p.bus.call(ctx, "can_do", map[string]any{"intent": intent, "scope": []string{p.b.Tool}})
	if err != nil {
		return "", "", err
	}
	for _, list := range []string{"candidates", "blocked"} {
		entries, _ := out[list].([]any)
		for _, e := range entries {
			entry, _ := e.(map[string]any)
			if entry["capability"] != p.b.Tool {
				continue
			}
			permission, _ = entry["permission"].(string)
			reason, _ = entry["reason"].(string)
			return permission, reason, nil
		}
	}
	return "", "", nil
}
