package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/promcp"
)

// Human approval runs as a multi round-trip tool call (SEP-2322): when the
// engine needs a person's approval and the client can show a form, the
// do_* call answers input_required with the form and a signed state; the
// client asks the person and calls again with the answer and the state.
// mcp-go performs the same exchange as a server-initiated elicitation for
// clients older than protocol 2026-07-28, so one path serves both. The state
// binds the answer to this tool, these arguments, this caller and the value
// shown, expires with the rule's timeout_s and is accepted once; the engine
// checks everything again on the second pass before it writes.

// approvalInput is the id of the approval form among the call's input requests.
const approvalInput = "approval"

// errAwaitingApproval stops the first pass at the engine's approval step.
var errAwaitingApproval = errors.New("awaiting a person's answer")

// doCall runs a do_* call whose arguments were checked, with approval when needed.
func (a *adapter) doCall(ctx context.Context, req mcp.CallToolRequest, args map[string]any, dr promcp.DoRequest) (*mcp.CallToolResult, error) {
	name := req.Params.Name
	caller := a.opts.Caller(ctx)
	// A write that has started must finish (within the capability's timeout)
	// and be recorded, even when the client cancels or the transport closes:
	// mcp-go cancels every in-flight request when stdin ends, and a bus
	// transaction cut short leaves the device's state unknown.
	work := context.WithoutCancel(ctx)
	if req.Params.RequestState != "" || len(req.Params.InputResponses) > 0 {
		return a.doApproved(work, req, args, dr, caller)
	}
	if !clientCanAsk(ctx) {
		// Approve stays nil: the engine refuses approval-gated calls.
		return a.runDo(work, caller, name, dr)
	}
	if dr.IdempotencyKey == "" {
		// Fixed now so that the approved retry acts under the same key.
		dr.IdempotencyKey = promcp.NewUUID()
	}
	var asked *engine.ApprovalRequest
	caller.Approve = func(_ context.Context, r engine.ApprovalRequest) (bool, error) {
		asked = &r
		return false, errAwaitingApproval
	}
	resp, err := a.e.Do(work, caller, name, dr)
	if err != nil {
		return nil, err
	}
	if asked == nil { // decided without a person: replayed, refused or not gated
		return result(resp, resp.Status == promcp.StatusFailed)
	}
	if asked.PreviousValue == nil {
		asked.PreviousValue = a.currentValue(work, caller, name)
	}
	digest, err := auth.ArgsDigest(args)
	if err != nil {
		return nil, fmt.Errorf("approval: %w", err)
	}
	value, err := json.Marshal(asked.Value)
	if err != nil {
		return nil, fmt.Errorf("approval: %w", err)
	}
	timeout := approvalTimeout(a.e.Policy(), name)
	state, claim, err := a.approvals.Issue(auth.ApprovalClaim{Tool: name, Args: digest, Key: dr.IdempotencyKey, Caller: caller.Identity, Value: value}, timeout)
	if err != nil {
		return nil, fmt.Errorf("approval: %w", err)
	}
	form := approvalForm(a.m.Device.ID, *asked, time.UnixMilli(claim.Expires), timeout)
	return server.NewInputRequestBuilder(state).Elicit(approvalInput, form).ToolResult(), nil
}

// doApproved is the second pass: it accepts the person's answer only with a
// valid state for exactly this call, then lets the engine decide again.
func (a *adapter) doApproved(ctx context.Context, req mcp.CallToolRequest, args map[string]any, dr promcp.DoRequest, caller engine.Caller) (*mcp.CallToolResult, error) {
	name := req.Params.Name
	digest, err := auth.ArgsDigest(args)
	if err != nil {
		return nil, fmt.Errorf("approval: %w", err)
	}
	claim, err := a.approvals.Redeem(req.Params.RequestState, auth.ApprovalClaim{Tool: name, Args: digest, Caller: caller.Identity})
	if err != nil {
		a.opts.Logger.Warn("approval refused", "tool", name, "caller", caller.Identity, "err", err)
		resp := a.refusal(name, dr.IdempotencyKey, fmt.Sprintf("%v: ask again without requestState", err))
		resp.Permission = promcp.RequiresHumanApproval
		return result(resp, true)
	}
	dr.IdempotencyKey = claim.Key
	answer := server.ElicitationResponse(req.Params.InputResponses, approvalInput)
	approved := answer != nil && answer.Action == mcp.ElicitationResponseActionAccept && approvedInForm(answer.Content)
	caller.Approve = func(_ context.Context, r engine.ApprovalRequest) (bool, error) {
		now, err := json.Marshal(r.Value)
		if err != nil || string(now) != string(claim.Value) {
			return false, fmt.Errorf("the value to write is now %s, not the %s the person approved", now, claim.Value)
		}
		return approved, nil
	}
	a.opts.Logger.Info("approval answered", "tool", name, "caller", caller.Identity, "key", claim.Key, "approved", approved)
	return a.runDo(ctx, caller, name, dr)
}

// currentValue is what the capability's read_* tool reports now, for the
// form, when the engine knows no value of the do_* point itself; nil when
// there is no such tool or no usable reading.
func (a *adapter) currentValue(ctx context.Context, caller engine.Caller, tool string) any {
	c := a.caps[tool]
	if c == nil {
		return nil
	}
	r, err := a.e.Read(ctx, caller, "read_"+c.Name)
	if err != nil || (r.Quality != promcp.QualityGood && r.Quality != promcp.QualityStale) {
		return nil
	}
	return r.Value
}

func (a *adapter) runDo(ctx context.Context, caller engine.Caller, name string, dr promcp.DoRequest) (*mcp.CallToolResult, error) {
	resp, err := a.e.Do(ctx, caller, name, dr)
	if err != nil {
		return nil, err
	}
	return result(resp, resp.Status == promcp.StatusFailed)
}

// approvedInForm reads the form's approve box; only an explicit true approves.
func approvedInForm(content any) bool {
	m, ok := content.(map[string]any)
	if !ok {
		return false
	}
	v, ok := m["approve"].(bool)
	return ok && v
}

// clientCanAsk reports whether the client declared form elicitation: per
// request from protocol 2026-07-28 on, at initialize before.
func clientCanAsk(ctx context.Context) bool {
	var caps *mcp.ClientCapabilities
	if info := server.RequestProtocolInfoFromContext(ctx); info != nil && info.Modern {
		caps = info.ClientCapabilities
	} else if s, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo); ok {
		c := s.GetClientCapabilities()
		caps = &c
	}
	if caps == nil || caps.Elicitation == nil {
		return false
	}
	el := caps.Elicitation
	return el.Form != nil || el.URL == nil // an empty elicitation capability means form
}

// approvalTimeout is the human_approval rule's timeout_s.
func approvalTimeout(p *policy.Policy, tool string) time.Duration {
	for _, r := range p.Rules(tool) {
		if r.Approval != nil && r.Approval.TimeoutS > 0 {
			return time.Duration(r.Approval.TimeoutS) * time.Second
		}
	}
	return policy.DefaultApprovalTimeoutS * time.Second
}

// approvalForm states what the person approves: tool, value, the value it
// replaces, side effects and how long the question stands.
func approvalForm(device string, r engine.ApprovalRequest, expires time.Time, timeout time.Duration) mcp.ElicitationParams {
	withUnit := func(v any) string {
		if v == nil {
			return "unknown (not read yet)"
		}
		if r.Unit == "" {
			return fmt.Sprint(v)
		}
		return fmt.Sprintf("%v %s", v, r.Unit)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "An agent asks to change the physical device %s.\n", device)
	fmt.Fprintf(&b, "Tool: %s\nNew value: %s\nPrevious value: %s\n", r.Tool, withUnit(r.Value), withUnit(r.PreviousValue))
	if len(r.SideEffects) > 0 {
		fmt.Fprintf(&b, "Side effects: %s\n", strings.Join(r.SideEffects, ", "))
	} else {
		b.WriteString("Side effects: none declared\n")
	}
	fmt.Fprintf(&b, "This question expires in %s (at %s UTC); no answer means no. Decline unless you expected this change.",
		timeout, expires.UTC().Format("15:04:05"))
	return mcp.ElicitationParams{
		Message: b.String(),
		RequestedSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"approve": map[string]any{
					"type":        "boolean",
					"title":       fmt.Sprintf("Approve %s = %s", r.Tool, withUnit(r.Value)),
					"description": "Tick to let physmcpd write this value now.",
					"default":     false,
				},
			},
			"required": []string{"approve"},
		},
	}
}
