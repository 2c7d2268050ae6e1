package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/internal/callpool"
	"github.com/physmcp/physmcpd/internal/ndjson"
)

// The stream transport (stdio, a serial line) reads, dispatches and writes
// the newline-delimited messages itself and hands each to mcp-go's
// MCPServer.HandleMessage, which does the rest as for any transport (hooks,
// the tool filter, recovery, in-flight cancellation). It replaces mcp-go's
// StdioServer, which decoded each message five times before HandleMessage
// did (into a RawMessage, for each kind of answer to a request of its own,
// for its method), read each line on a goroutine of its own and wrote each
// answer through fmt: a third of a proxy's CPU time per read over a serial
// line. A read_*, can_do or do_* call that the HTTP transport's fast path
// would answer (fastread.go: no _meta, a tool the caller sees, mcp-go's own
// handler and encoding, a do_* only when the client cannot be asked for
// approval) is answered by it here too, without HandleMessage,
// whose five decodes of the message were a seventh of the proxy's CPU per
// read; notifications/cancelled ends such a call as mcp-go ends its own.
// physmcpd sends its clients no requests (sampling, elicitation as a
// request, roots), so answers from the client are dropped, as
// HandleMessage drops them.

// Defaults of StreamLimits, mcp-go's StdioServer's.
const (
	defaultStreamWorkers = 5
	defaultStreamQueue   = 100
)

// stream is one session on a stream.
type stream struct {
	s     *server.MCPServer
	fast  *fastReads // nil: every call goes to HandleMessage
	w     *lineWriter
	limit int // MaxMessageBytes

	mu    sync.Mutex
	reads map[string]context.CancelFunc // calls answered by fast, by id
}

// serveLines runs one session of s on in/out. When in ends, the tool calls
// already read are answered (a do_ sent just before the client closed its
// end still acts once and says so), then the session's other requests are
// cancelled; when ctx ends, everything is.
func serveLines(ctx context.Context, s *server.MCPServer, in io.Reader, out io.Writer, lim StreamLimits) error {
	workers, queue := lim.Workers, lim.Queue
	if workers <= 0 {
		workers = defaultStreamWorkers
	}
	if queue <= 0 {
		queue = defaultStreamQueue
	}
	session := &streamSession{notifications: make(chan mcp.JSONRPCNotification, 100)}
	if err := s.RegisterSession(ctx, session); err != nil {
		return err
	}
	defer s.UnregisterSession(ctx, session.SessionID())
	ctx, cancel := context.WithCancel(s.WithContext(ctx, session))
	defer cancel()

	st := &stream{s: s, fast: fastReadsOf(s), w: &lineWriter{out: out}, limit: lim.MaxMessageBytes, reads: map[string]context.CancelFunc{}}
	var others sync.WaitGroup
	others.Go(func() {
		for {
			select {
			case n := <-session.notifications:
				st.w.send(n)
			case <-ctx.Done():
				return
			}
		}
	})
	calls := callpool.Start(ctx, workers, queue, func(msg json.RawMessage) { st.call(ctx, msg) })
	requests := &group{}
	lines := bufio.NewReaderSize(in, 4096)
	done := calls.Read(ctx, func() (json.RawMessage, bool, error) { return st.next(ctx, lines, requests) },
		func() bool { return lines.Buffered() > 0 })
	var err error
	ended := false // the input, not ctx
	select {
	case err = <-done:
		calls.Close()
		ended = true
	case <-ctx.Done():
		// The reader may sit in a Read that only the end of in (closing
		// the line, the process exiting) ends; it starts nothing more.
		err = ctx.Err()
	}
	cancel()
	calls.Wait()
	requests.closeAndWait()
	others.Wait()
	if ended { // what the last calls had the session told goes out too
		for len(session.notifications) > 0 {
			st.w.send(<-session.notifications)
		}
	}
	return err
}

// next reads messages until one is a tools/call, which it returns for the
// calls' pool (callpool: the reader may run it itself, else a worker; the
// reader waits when they and the queue are full), and false at the input's
// end (nil) or ctx's (its error). It runs any other request on its own
// goroutine (one may block, such as subscriptions/listen), and handles
// notifications and messages that do not decode itself.
func (st *stream) next(ctx context.Context, in *bufio.Reader, requests *group) (json.RawMessage, bool, error) {
	for {
		line, err := ndjson.ReadLine(in, st.limit)
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		if errors.Is(err, io.EOF) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		msg := json.RawMessage(bytes.Clone(line)) // the reader's buffer is reused
		var head struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				RequestID any `json:"requestId"`
			} `json:"params"`
		}
		switch {
		case json.Unmarshal(msg, &head) != nil || head.ID == nil:
			// a notification, or what HandleMessage answers with a parse error
			if head.Method == string(mcp.MethodNotificationCancelled) {
				st.cancelRead(head.Params.RequestID)
			}
			st.w.send(st.s.HandleMessage(ctx, msg))
		case head.Method == string(mcp.MethodToolsCall):
			return msg, true, nil
		case head.Method != "":
			if !requests.Go(func() { st.w.send(st.s.HandleMessage(ctx, msg)) }) {
				return nil, false, ctx.Err()
			}
		}
	}
}

// call answers a tools/call: a read_*, can_do or do_* on the fast path (fastread.go: the
// message decoded once, the handler mcp-go holds for the tool run as mcp-go
// runs it, the answer encoded as mcp-go encodes it), anything else through
// HandleMessage. A read's notifications (a log message) go on the session's
// channel, as HandleMessage's do.
func (st *stream) call(ctx context.Context, msg json.RawMessage) {
	if st.fast != nil {
		if m, reqID, tool, asks, ok := st.fast.readCall(ctx, msg); ok && !(asks && sessionCanAsk(server.ClientSessionFromContext(ctx))) {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			key := fmt.Sprint(reqID) // as mcp-go keys its calls: "1" and 1 are one
			st.mu.Lock()
			st.reads[key] = cancel
			st.mu.Unlock()
			defer func() {
				st.mu.Lock()
				delete(st.reads, key)
				st.mu.Unlock()
			}()
			answer := st.fast.call(ctx, &fastCall{id: reqID, cancel: cancel}, reqID, msg, m.CallToolRequest, nil, tool.Handler)
			st.fast.served.Add(1)
			if b, ok := appendResponse(nil, answer); ok {
				st.w.write(b)
			} else {
				st.w.send(answer)
			}
			return
		}
	}
	st.w.send(st.s.HandleMessage(ctx, msg))
}

// cancelRead ends the call answered on the fast path that a
// notifications/cancelled names, as mcp-go ends its own calls (it then
// handles the notification as before); a do_* finishes its write either way.
func (st *stream) cancelRead(reqID any) {
	if reqID == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if cancel := st.reads[fmt.Sprint(reqID)]; cancel != nil {
		cancel()
	}
}

// group runs goroutines until it is closed, and waits for them.
type group struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Go runs f unless the group is closed, and says whether it does.
func (g *group) Go(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Go(f)
	return true
}

func (g *group) closeAndWait() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}

// lineWriter writes one message a line; the workers, the request goroutines
// and the notifications share it.
type lineWriter struct {
	mu  sync.Mutex
	out io.Writer
}

func (w *lineWriter) send(m mcp.JSONRPCMessage) {
	if m == nil {
		return // a notification handled, an answer from the client dropped
	}
	b, err := json.Marshal(m)
	if err != nil {
		slog.Error("cannot encode an answer on the stream", "err", err)
		return
	}
	w.write(append(b, '\n'))
}

// write writes line, which ends in a newline.
func (w *lineWriter) write(line []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.out.Write(line); err != nil {
		slog.Debug("cannot answer on the stream", "err", err)
	}
}

// streamSession is the one client of a stream: what mcp-go keeps of it
// (initialized, the log level it set, its info and capabilities, the
// protocol version negotiated) and the notifications it is sent.
type streamSession struct {
	notifications chan mcp.JSONRPCNotification
	initialized   atomic.Bool
	level         atomic.Value // mcp.LoggingLevel
	info          atomic.Value // mcp.Implementation
	caps          atomic.Value // mcp.ClientCapabilities
	version       atomic.Value // string
}

var (
	_ server.SessionWithLogging         = (*streamSession)(nil)
	_ server.SessionWithClientInfo      = (*streamSession)(nil)
	_ server.SessionWithProtocolVersion = (*streamSession)(nil)
)

// SessionID is the one mcp-go's StdioServer gives its session.
func (s *streamSession) SessionID() string { return "stdio" }

func (s *streamSession) NotificationChannel() chan<- mcp.JSONRPCNotification {
	return s.notifications
}

func (s *streamSession) Initialize() {
	s.level.Store(mcp.LoggingLevelError) // mcp-go's default
	s.initialized.Store(true)
}

func (s *streamSession) Initialized() bool { return s.initialized.Load() }

func (s *streamSession) SetLogLevel(l mcp.LoggingLevel) { s.level.Store(l) }

func (s *streamSession) GetLogLevel() mcp.LoggingLevel {
	if l, ok := s.level.Load().(mcp.LoggingLevel); ok {
		return l
	}
	return mcp.LoggingLevelError
}

func (s *streamSession) GetClientInfo() mcp.Implementation {
	i, _ := s.info.Load().(mcp.Implementation)
	return i
}

func (s *streamSession) SetClientInfo(i mcp.Implementation) { s.info.Store(i) }

func (s *streamSession) GetClientCapabilities() mcp.ClientCapabilities {
	c, _ := s.caps.Load().(mcp.ClientCapabilities)
	return c
}

func (s *streamSession) SetClientCapabilities(c mcp.ClientCapabilities) { s.caps.Store(c) }

func (s *streamSession) ProtocolVersion() string {
	v, _ := s.version.Load().(string)
	return v
}

func (s *streamSession) SetProtocolVersion(v string) { s.version.Store(v) }
