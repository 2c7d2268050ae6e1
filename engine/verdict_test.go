package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// judgingSource is an adopted device that judges can_do itself: each
// question says it is asked, then waits for its answer.
type judgingSource struct {
	fakeSource
	asked   chan struct{}
	answers chan [2]string // permission, reason
	gone    chan struct{}  // closed at the end: questions still waiting fail
}

func (s *judgingSource) BindVirtual(c *manifest.Capability, _ drivers.BindOptions) (drivers.Point, error) {
	return &judgingPoint{fakePoint: &fakePoint{s: &s.fakeSource, c: c}, s: s}, nil
}

type judgingPoint struct {
	*fakePoint
	s *judgingSource
}

func (p *judgingPoint) Assess(ctx context.Context, _ drivers.Value) (string, string, error) {
	select {
	case p.s.asked <- struct{}{}:
	default:
	}
	select {
	case a := <-p.s.answers:
		return a[0], a[1], nil
	case <-p.s.gone:
		return "", "", errors.New("test over")
	case <-ctx.Done():
		return "", "", ctx.Err()
	}
}

// A source's answer to can_do that comes after can_do's deadline stands in
// for the next answer that does not come in time, for LateAnswerTTL. (That an
// answer in time does not: TestAggregatorCanDoWithTwoHungDevices.)
func TestLateAnswerStandsIn(t *testing.T) {
	r := newRig(t)
	src := &judgingSource{fakeSource: fakeSource{values: map[string]any{"read_fan_speed": 10.0}},
		asked: make(chan struct{}, 1), answers: make(chan [2]string), gone: make(chan struct{})}
	t.Cleanup(func() { close(src.gone) })
	bus := &manifest.Bus{Name: "dev1", Type: manifest.BusMCP, MCP: &manifest.MCPBus{URL: "http://127.0.0.1:9/mcp"}}
	if err := r.e.Adopt(bus, src, adoptedCaps("dev1", "read_fan_speed", "do_fan_speed"), nil); err != nil {
		t.Fatal(err)
	}
	fan := func() (promcp.Permission, string) {
		t.Helper()
		rep, err := r.e.CanDo(context.Background(), operator, promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"fan", "speed"}, Action: "set", Value: 20.0}})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range rep.Candidates {
			if c.Capability == "do_fan_speed" {
				return c.Permission, ""
			}
		}
		for _, b := range rep.Blocked {
			if b.Capability == "do_fan_speed" {
				return b.Permission, b.Reason
			}
		}
		t.Fatalf("do_fan_speed not in %+v", rep)
		return "", ""
	}
	answer := func(perm, reason string) {
		<-src.asked
		src.answers <- [2]string{perm, reason}
	}

	perm, reason := fan()
	if perm != promcp.SourceUnreachable || !strings.Contains(reason, "no answer within can_do's") {
		t.Errorf("no answer in time, none before: %s %q; want source_unreachable", perm, reason)
	}

	// The question of that can_do is answered late: the next can_do that
	// gets no answer in time (its own question waits) takes that one.
	answer("policy_denied", "late at night")
	deadline := time.Now().Add(engine.LateAnswerTTL)
	for perm == promcp.SourceUnreachable && time.Now().Before(deadline) {
		perm, reason = fan()
	}
	if perm != promcp.PolicyDenied || !strings.Contains(reason, "late at night (its answer of 0s ago: none within can_do's") {
		t.Errorf("after a late answer: %s %q; want it in place of the missing one", perm, reason)
	}

	r.clock.Advance(engine.LateAnswerTTL + time.Millisecond)
	if perm, reason := fan(); perm != promcp.SourceUnreachable {
		t.Errorf("%v after the late answer: %s %q; want source_unreachable", engine.LateAnswerTTL, perm, reason)
	}
}
