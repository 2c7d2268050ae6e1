package mcpserver

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/promcp"
)

// MaxSubscriptionsPerSession bounds one session's subscriptions; the engine
// bounds them all together (engine.MaxWatches).
const MaxSubscriptionsPerSession = 64

// subscriptions are the watches of an endpoint's sessions, by session id and
// URI. Each forwards its updates to its session as
// notifications/resources/updated until it is removed or the session ends.
//
// mcp-go v1.2.1 acknowledges resources/subscribe and keeps nothing (none of
// its sessions implements SessionWithResourceSubscriptions), and its
// notification helpers cannot carry _meta, so the notifications are put on
// the session's notification channel here, as mcp-go's helpers do: an HTTP
// session's channel is drained by its GET stream (or a POST stream in
// progress), stdio's by its writer.
type subscriptions struct {
	logger *slog.Logger
	// notify, when set, delivers an update to a call of the session that
	// is answered outside mcp-go (fastread.go) and says whether it did.
	notify func(server.ClientSession, mcp.JSONRPCNotification) bool

	mu        sync.Mutex
	live      map[string]bool // sessions mcp-go has registered and not yet ended
	bySession map[string]map[string]*engine.Watch
}

func newSubscriptions(logger *slog.Logger) *subscriptions {
	return &subscriptions{logger: logger, live: map[string]bool{}, bySession: map[string]map[string]*engine.Watch{}}
}

func (t *subscriptions) startSession(id string) {
	t.mu.Lock()
	t.live[id] = true
	t.mu.Unlock()
}

// endSession stops the session's watches: nobody is left to tell.
func (t *subscriptions) endSession(id string) {
	t.mu.Lock()
	subs := t.bySession[id]
	delete(t.bySession, id)
	delete(t.live, id)
	t.mu.Unlock()
	for _, w := range subs {
		w.Stop()
	}
}

// sessions lists the sessions mcp-go has registered and not yet ended.
func (t *subscriptions) sessions() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]string, 0, len(t.live))
	for id := range t.live {
		ids = append(ids, id)
	}
	return ids
}

func (t *subscriptions) has(id, uri string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bySession[id][uri] != nil
}

// add forwards w's updates of uri to session; it takes w over (and stops it
// when it is not kept: a second subscription to uri, a session that ended).
func (t *subscriptions) add(session server.ClientSession, uri string, w *engine.Watch) error {
	id := session.SessionID()
	t.mu.Lock()
	subs := t.bySession[id]
	switch {
	case !t.live[id]:
		t.mu.Unlock()
		w.Stop()
		return fmt.Errorf("subscribing to %s: the session has ended or is not established yet", uri)
	case subs[uri] != nil:
		t.mu.Unlock()
		w.Stop()
		return nil
	case len(subs) >= MaxSubscriptionsPerSession:
		t.mu.Unlock()
		w.Stop()
		return fmt.Errorf("subscribing to %s: this session already has %d subscriptions, the most one may hold; unsubscribe from something first", uri, MaxSubscriptionsPerSession)
	}
	if subs == nil {
		subs = map[string]*engine.Watch{}
		t.bySession[id] = subs
	}
	subs[uri] = w
	t.mu.Unlock()
	go t.forward(session, uri, w)
	return nil
}

// remove ends session id's subscription to uri, if it has one.
func (t *subscriptions) remove(id, uri string) {
	t.mu.Lock()
	w := t.bySession[id][uri]
	delete(t.bySession[id], uri)
	t.mu.Unlock()
	if w != nil {
		w.Stop()
	}
}

// forward sends each update until the watch stops. A client that does not
// take its notifications (no GET stream open) loses updates rather than
// holding the watcher up: the next change is announced anyway.
func (t *subscriptions) forward(session server.ClientSession, uri string, w *engine.Watch) {
	dropped := 0
	for r := range w.Updates {
		n := updatedNotification(uri, r)
		if t.notify != nil && t.notify(session, n) {
			continue
		}
		if c, ok := session.(server.SessionWithStreamableHTTPConfig); ok {
			c.UpgradeToSSEWhenReceiveNotification()
		}
		select {
		case session.NotificationChannel() <- n:
		default:
			if dropped++; dropped == 1 {
				t.logger.Warn("resource update dropped: the client is not taking notifications (open the session's GET stream)",
					"session", session.SessionID(), "uri", uri)
			}
		}
	}
}

// updatedNotification announces that uri changed, with the reading itself in
// _meta so that a client need not read the resource again.
func updatedNotification(uri string, r promcp.ReadResponse) mcp.JSONRPCNotification {
	return mcp.JSONRPCNotification{
		JSONRPC: mcp.JSONRPC_VERSION,
		Notification: mcp.Notification{
			Method: string(mcp.MethodNotificationResourceUpdated),
			Params: mcp.NotificationParams{
				Meta:             map[string]any{MetaReading: r},
				AdditionalFields: map[string]any{"uri": uri},
			},
		},
	}
}
