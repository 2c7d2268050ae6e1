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
// binds the answer to this tool, these arguments, this caller, the value to
// write and the device value the form showed (read for the form), expires
// with the rule's timeout_s and is accepted once; the engine checks
// everything again on the second pass, and writes only if the device still
// holds the value shown. If it moved, the person is asked again.

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
	return a.askPerson(work, name, args, dr, caller, "")
}

// askPerson runs the call up to the engine's approval step and, when the
// engine asks, answers with the form and a state signed for this call, the
// value to write and the device value the form shows. note, when set, tells
// the person why they are asked again.
func (a *adapter) askPerson(ctx context.Context, name string, args map[string]any, dr promcp.DoRequest, caller engine.Caller, note string) (*mcp.CallToolResult, error) {
	var asked *engine.ApprovalRequest
	caller.Approve = func(_ context.Context, r engine.ApprovalRequest) (engine.Approval, error) {
		asked = &r
		return engine.Approval{}, errAwaitingApproval
	}
	resp, err := a.e.Do(ctx, caller, name, dr)
	if err != nil {
		return nil, err
	}
	if asked == nil { // decided without a person: replayed, refused or not gated
		return result(resp, resp.Status == promcp.StatusFailed)
	}
	digest, err := auth.ArgsDigest(args)
	if err != nil {
		return nil, fmt.Errorf("approval: %w", err)
	}
	value, verr := json.Marshal(asked.Value)
	previous, perr := json.Marshal(asked.PreviousValue)
	if err := errors.Join(verr, perr); err != nil {
		return nil, fmt.Errorf("approval: %w", err)
	}
	timeout := approvalTimeout(a.e.Policy(), name)
	state, claim, err := a.approvals.Issue(auth.ApprovalClaim{Tool: name, Args: digest, Key: dr.IdempotencyKey, Caller: caller.Identity, Value: value, Previous: previous}, timeout)
	if err != nil {
		return nil, fmt.Errorf("approval: %w", err)
	}
	form := approvalForm(a.m.Device.ID, *asked, note, time.UnixMilli(claim.Expires), timeout)
	return server.NewInputRequestBuilder(state).Elicit(approvalInput, form).ToolResult(), nil
}

// doApproved is the second pass: it accepts the person's answer only with a
// valid state for exactly this call, then lets the engine decide again. The
// answer carries the device value the person saw; if the device has moved
// from it, the engine writes nothing and the person is asked again.
func (a *adapter) doApproved(ctx context.Context, req mcp.CallToolRequest, args map[string]any, dr promcp.DoRequest, caller engine.Caller) (*mcp.CallToolResult, error) {
	name := req.Params.Name
	digest, err := auth.ArgsDigest(args)
	if err != nil {
		return nil, fmt.Errorf("approval: %w", err)
	}
	claim, err := a.approvals.Redeem(req.Params.RequestState, auth.ApprovalClaim{Tool: name, Args: digest, Caller: caller.Identity})
	if err != nil {
		a.opts.Logger.Warn("approval refused", "tool", name, "caller", caller.Identity, "err", err)
		return a.refused(ctx, name, args, dr.IdempotencyKey, promcp.RequiresHumanApproval, fmt.Sprintf("%v: ask again without requestState", err))
	}
	var shown any
	if err := json.Unmarshal(claim.Previous, &shown); err != nil {
		return nil, fmt.Errorf("approval: the previous value in the state: %w", err)
	}
	dr.IdempotencyKey = claim.Key
	answer := server.ElicitationResponse(req.Params.InputResponses, approvalInput)
	approved := answer != nil && answer.Action == mcp.ElicitationResponseActionAccept && approvedInForm(answer.Content)
	granted := false
	caller.Approve = func(_ context.Context, r engine.ApprovalRequest) (engine.Approval, error) {
		now, err := json.Marshal(r.Value)
		if err != nil || string(now) != string(claim.Value) {
			return engine.Approval{}, fmt.Errorf("the value to write is now %s, not the %s the person approved", now, claim.Value)
		}
		granted = approved
		return engine.Approval{Approved: approved, Previous: shown}, nil
	}
	a.opts.Logger.Info("approval answered", "tool", name, "caller", caller.Identity, "key", claim.Key, "approved", approved)
	resp, err := a.e.Do(ctx, caller, name, dr)
	if err != nil {
		return nil, err
	}
	if granted && resp.Permission == promcp.RequiresHumanApproval {
		// The engine refuses an approved call so only when the device no
		// longer holds the value the person saw: nothing was written. Show
		// the value it holds now and ask again.
		a.opts.Logger.Info("approval outdated, asking again", "tool", name, "caller", caller.Identity, "key", claim.Key, "reason", resp.Reason)
		return a.askPerson(ctx, name, args, dr, caller, resp.Reason)
	}
	return result(resp, resp.Status == promcp.StatusFailed)
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
	if info := server.RequestProtocolInfoFromContext(ctx); info != nil && info.Modern {
		return canAsk(info.ClientCapabilities)
	}
	return sessionCanAsk(server.ClientSessionFromContext(ctx))
}

// sessionCanAsk is clientCanAsk for a session before protocol 2026-07-28.
func sessionCanAsk(session server.ClientSession) bool {
	s, ok := session.(server.SessionWithClientInfo)
	if !ok {
		return false
	}
	caps := s.GetClientCapabilities()
	return canAsk(&caps)
}

func canAsk(caps *mcp.ClientCapabilities) bool {
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
// replaces (read from the device for this form), side effects and how long
// the question stands; note says why the person is asked again, if they are.
func approvalForm(device string, r engine.ApprovalRequest, note string, expires time.Time, timeout time.Duration) mcp.ElicitationParams {
	withUnit := func(v any) string {
		if r.Unit == "" {
			return fmt.Sprint(v)
		}
		return fmt.Sprintf("%v %s", v, r.Unit)
	}
	previous := withUnit(r.PreviousValue)
	if r.PreviousError != "" {
		previous = fmt.Sprintf("could not be read (%s)", r.PreviousError)
	}
	var b strings.Builder
	if note != "" {
		fmt.Fprintf(&b, "Asked again: %s.\n", note)
	}
	fmt.Fprintf(&b, "An agent asks to change the physical device %s.\n", device)
	fmt.Fprintf(&b, "Tool: %s\nNew value: %s\nPrevious value: %s\n", r.Tool, withUnit(r.Value), previous)
	if len(r.SideEffects) > 0 {
		fmt.Fprintf(&b, "Side effects: %s\n", strings.Join(r.SideEffects, ", "))
	} else {
		b.WriteString("Side effects: none declared\n")
	}
	fmt.Fprintf(&b, "This question expires in %s (at %s UTC); no answer means no. If the device changes before the write, nothing is written and you are asked again. Decline unless you expected this change.",
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
