package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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
	// gets no answer in time (its own question waits) takes that one. (A
	// can_do still waiting for that question when it is answered takes the
	// answer as its own.)
	answer("policy_denied", "late at night")
	deadline := time.Now().Add(engine.LateAnswerTTL)
	for !strings.Contains(reason, "(its answer of") && time.Now().Before(deadline) {
		perm, reason = fan()
	}
	if perm != promcp.PolicyDenied || !strings.Contains(reason, "late at night (its answer of 0s ago: no answer within can_do's") {
		t.Errorf("after a late answer: %s %q; want it in place of the missing one", perm, reason)
	}

	r.clock.Advance(engine.LateAnswerTTL + time.Millisecond)
	if perm, reason := fan(); perm != promcp.SourceUnreachable {
		t.Errorf("%v after the late answer: %s %q; want source_unreachable", engine.LateAnswerTTL, perm, reason)
	}
}

// hungSource is an adopted device whose can_do never answers (until the
// test ends). It counts the questions it holds at once, per tool and value
// and in all.
type hungSource struct {
	fakeSource
	gone  chan struct{} // closed at the end: the questions fail
	asked chan struct{} // one signal per question, as far as it holds

	qmu          sync.Mutex
	holding      map[string]int // "tool value" → questions held
	most         map[string]int // the most held at once
	all, mostAll int
}

func (s *hungSource) BindVirtual(c *manifest.Capability, _ drivers.BindOptions) (drivers.Point, error) {
	return &hungPoint{fakePoint: &fakePoint{s: &s.fakeSource, c: c}, s: s}, nil
}

type hungPoint struct {
	*fakePoint
	s *hungSource
}

func (p *hungPoint) Assess(ctx context.Context, v drivers.Value) (string, string, error) {
	key := fmt.Sprint(p.c.Binding.Virtual.Tool, " ", v)
	s := p.s
	s.qmu.Lock()
	s.holding[key]++
	s.most[key] = max(s.most[key], s.holding[key])
	s.all++
	s.mostAll = max(s.mostAll, s.all)
	s.qmu.Unlock()
	defer func() {
		s.qmu.Lock()
		s.holding[key]--
		s.all--
		s.qmu.Unlock()
	}()
	select {
	case s.asked <- struct{}{}:
	default:
	}
	select {
	case <-s.gone:
	case <-ctx.Done():
	}
	return "", "", errors.New("no answer")
}

// A burst of can_do about a source that does not answer asks it one
// question at a time about the same tool and value, and at most
// MaxQuestions in all: the source's transaction slots stay free, and a
// do_* right after is sent to it, not refused as device busy (it was, with
// every can_do holding a slot for 5 s).
func TestHungSourceAskedOnce(t *testing.T) {
	r := newRig(t)
	src := &hungSource{fakeSource: fakeSource{values: map[string]any{"read_fan_speed": 10.0, "read_damper": 1.0}},
		gone: make(chan struct{}), asked: make(chan struct{}, engine.MaxQueued), holding: map[string]int{}, most: map[string]int{}}
	t.Cleanup(func() { close(src.gone) })
	bus := &manifest.Bus{Name: "dev1", Type: manifest.BusMCP, MCP: &manifest.MCPBus{URL: "http://127.0.0.1:9/mcp"}}
	if err := r.e.Adopt(bus, src, adoptedCaps("dev1", "read_fan_speed", "do_fan_speed", "read_damper", "do_damper"), nil); err != nil {
		t.Fatal(err)
	}
	burst := func(tool string, value func(i int) float64) {
		t.Helper()
		var wg sync.WaitGroup
		for i := range 100 {
			wg.Go(func() {
				req := promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"fan"}, Action: "set", Value: value(i)}, Scope: []string{tool}}
				rep, err := r.e.CanDo(context.Background(), operator, req)
				if err != nil || len(rep.Blocked) != 1 || rep.Blocked[0].Permission != promcp.SourceUnreachable {
					t.Errorf("can_do of %s with its source hung: %+v %v; want it blocked source_unreachable", tool, rep, err)
				}
			})
		}
		wg.Wait()
		select {
		case <-src.asked:
		case <-time.After(10 * time.Second):
			t.Fatalf("100 can_do of %s: the source was never asked", tool)
		}
	}
	do := func(tool string, value float64, writes int) {
		t.Helper()
		res, err := r.e.Do(context.Background(), operator, tool, promcp.DoRequest{Value: value, IdempotencyKey: tool})
		src.mu.Lock()
		sent := src.writes
		src.mu.Unlock()
		if err != nil || res.Status != promcp.StatusSuccess || sent != writes {
			t.Errorf("%s right after the can_do: %+v %v, %d writes sent; want it sent (%d)", tool, res, err, sent, writes)
		}
	}

	burst("do_fan_speed", func(int) float64 { return 20 })
	do("do_fan_speed", 20, 1)
	burst("do_damper", func(i int) float64 { return float64(i) })
	do("do_damper", 5, 2)

	src.qmu.Lock()
	defer src.qmu.Unlock()
	t.Logf("held at once: %d about do_fan_speed 20, %d in all", src.most["do_fan_speed 20"], src.mostAll)
	if n := src.most["do_fan_speed 20"]; n != 1 {
		t.Errorf("100 can_do of do_fan_speed 20: the source held %d questions about it at once; want 1", n)
	}
	if src.mostAll > engine.MaxQuestions {
		t.Errorf("then 100 of do_damper, each value once: the source held %d questions at once; want at most %d", src.mostAll, engine.MaxQuestions)
	}
}
