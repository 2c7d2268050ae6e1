//go:build !lite

package mcpserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
)

// fakeSession is a session nobody reads from.
type fakeSession struct {
	id string
	ch chan mcp.JSONRPCNotification
}

func (s *fakeSession) Initialize()                                         {}
func (s *fakeSession) Initialized() bool                                   { return true }
func (s *fakeSession) NotificationChannel() chan<- mcp.JSONRPCNotification { return s.ch }
func (s *fakeSession) SessionID() string                                   { return s.id }

// A session holds at most MaxSubscriptionsPerSession subscriptions, none
// once it has ended, and its end stops them all.
func TestSubscriptionsPerSession(t *testing.T) {
	m, diags := manifest.Load("testdata/resources/physmcp.manifest.yml")
	if m == nil || diags.HasErrors() {
		t.Fatalf("manifest: %v", diags)
	}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.Open, true)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(m, nil, buses, engine.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	watch := func() *engine.Watch {
		w, err := e.Watch(context.Background(), engine.Caller{Role: manifest.RoleAdmin}, "read_level", engine.WatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	subs := newSubscriptions(slog.New(slog.NewTextHandler(io.Discard, nil)))
	s := &fakeSession{id: "s1", ch: make(chan mcp.JSONRPCNotification, 1)}
	if err := subs.add(s, "u", watch()); err == nil || !strings.Contains(err.Error(), "not established") {
		t.Errorf("a session mcp-go has not registered: %v", err)
	}
	subs.startSession("s1")
	for i := range MaxSubscriptionsPerSession {
		if err := subs.add(s, fmt.Sprint("u", i), watch()); err != nil {
			t.Fatal(err)
		}
	}
	if err := subs.add(s, "u0", watch()); err != nil { // the same URI again: kept once
		t.Fatal(err)
	}
	err = subs.add(s, "one too many", watch())
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(MaxSubscriptionsPerSession)) {
		t.Errorf("subscription %d: %v", MaxSubscriptionsPerSession+1, err)
	}
	if n := e.Watches(); n != MaxSubscriptionsPerSession {
		t.Errorf("%d watches open, want %d (refused and duplicate ones stopped)", n, MaxSubscriptionsPerSession)
	}
	subs.endSession("s1")
	if n := e.Watches(); n != 0 {
		t.Errorf("%d watches after the session ended", n)
	}
	if err := subs.add(s, "u", watch()); err == nil {
		t.Error("a subscription was added to an ended session")
	}
	if n := e.Watches(); n != 0 {
		t.Errorf("%d watches after a refused subscription", n)
	}
}
