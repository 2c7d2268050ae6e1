//go:build !lite

package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/mcpserver"
)

// loopback serves h as serve does (NewHTTPServer) on a loopback port. open
// counts the server's connections not closed yet: each holds a descriptor.
func loopback(t testing.TB, h http.Handler) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := mcpserver.NewHTTPServer(h)
	open := new(atomic.Int64)
	srv.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String(), open
}

// sessionDevice serves the example device's endpoint with limits; it
// returns the endpoint URL and the server's open connections.
func sessionDevice(t testing.TB, limits mcpserver.SessionLimits) (string, *atomic.Int64) {
	t.Helper()
	m, p := loadExample(t)
	_, s := startDevice(t, m, p)
	h := mcpserver.NewEndpointsHandler([]mcpserver.Endpoint{{Path: mcpserver.EndpointPath, Server: s}}, quietLogger(), limits)
	base, open := loopback(t, h)
	t.Cleanup(func() { h.CloseSessions(context.Background()) })
	return base + mcpserver.EndpointPath, open
}

// dial starts an MCP client on a protocol version with sessions (before
// 2026-07-28) and returns its initialize error.
func dial(t *testing.T, url string, opts ...transport.StreamableHTTPCOption) (*client.Client, error) {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr, client.WithProtocolVersion(mcp.ProtocolVersion20251125))
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "physmcpd-limits", Version: "test"}
	_, err = c.Initialize(context.Background(), init)
	return c, err
}

// openSession posts an initialize, as a client that then goes away does.
func openSession(hc *http.Client, url string) (string, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(initializeBody))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		return "", fmt.Errorf("initialize: %d, session %q: %s", resp.StatusCode, id, body)
	}
	return id, nil
}

// liveHeap is the memory the program still references: bytes in heap
// objects right after a full collection. RSS would also count memory the
// runtime has freed but not yet returned to the OS (it does so lazily) and
// the race detector's shadow memory, so it would not show a leak reliably.
func liveHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// 20,000 sessions opened and abandoned leave the live heap within 10 MB of
// where it was once they have idled out (without the release mcp-go would
// keep about 18 KB of each: 350 MB).
func TestAbandonedSessionsAreReleased(t *testing.T) {
	const sessions, workers = 20000, 8
	const idle = 2 * time.Second
	url, open := sessionDevice(t, mcpserver.SessionLimits{IdleTimeout: idle, MaxSessions: sessions})
	before := liveHeap()

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	start := time.Now()
	first, err := openSession(hc, url)
	if err != nil {
		t.Fatal(err)
	}
	next := new(atomic.Int64)
	next.Store(1)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for next.Add(1) <= sessions {
				if _, err := openSession(hc, url); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	opened := time.Since(start)
	last := liveHeap()
	hc.CloseIdleConnections()

	// The last session is released within 1.25 idle timeouts; then the
	// sweep's work may still be finishing.
	time.Sleep(idle * 5 / 4)
	deadline := time.Now().Add(10 * time.Second)
	var after uint64
	for {
		after = liveHeap()
		if after < before+10<<20 && open.Load() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live heap %.1f MiB after the sessions idled out, %.1f MiB before them (%d connections open)",
				mib(after), mib(before), open.Load())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%d sessions opened in %s; live heap %.1f MiB before, %.1f MiB when the last was opened, %.1f MiB after %s idle",
		sessions, opened.Round(time.Millisecond), mib(before), mib(last), mib(after), idle)
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Mcp-Session-Id", first)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a released session: status %d, want 404", resp.StatusCode)
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// BenchmarkOpenSession opens sessions that stay open and reports the live
// heap each holds until it ends or idles out: what the session cap bounds.
func BenchmarkOpenSession(b *testing.B) {
	url, _ := sessionDevice(b, mcpserver.SessionLimits{MaxSessions: b.N + 1, IdleTimeout: time.Hour})
	hc := &http.Client{}
	before := liveHeap()
	b.ResetTimer()
	for range b.N {
		if _, err := openSession(hc, url); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	hc.CloseIdleConnections()
	b.ReportMetric(float64(liveHeap()-before)/float64(b.N), "heap-B/session")
}

// Beyond the cap, initialize is refused with 503 and a JSON-RPC error that
// names the cap; a session ended with DELETE makes room.
func TestSessionCap(t *testing.T) {
	url, _ := sessionDevice(t, mcpserver.SessionLimits{MaxSessions: 2, IdleTimeout: time.Minute})
	first, err := dial(t, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, url); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, url); err == nil || !strings.Contains(err.Error(), "keeps at most 2 open (serve --max-sessions)") {
		t.Fatalf("third session: %v, want the cap named", err)
	}

	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(initializeBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var refusal struct {
		ID    int `json:"id"`
		Error struct {
			Message string `json:"message"`
			Data    struct {
				MaxSessions int `json:"max_sessions"`
			} `json:"data"`
		} `json:"error"`
	}
	err = json.NewDecoder(resp.Body).Decode(&refusal)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || refusal.ID != 1 || refusal.Error.Data.MaxSessions != 2 {
		t.Fatalf("refusal: %d %+v %v", resp.StatusCode, refusal, err)
	}
	// Both sessions are idle, due in a minute, released within 15 s more.
	if after, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || after < 70 || after > 75 {
		t.Errorf("Retry-After %q, want the time until the first idle session is released", resp.Header.Get("Retry-After"))
	}

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, url); err != nil {
		t.Errorf("after a DELETE: %v", err)
	}
}

// Initializes racing for the last places get exactly as many sessions as
// the cap allows, and a GET under an unknown session id opens no stream.
func TestSessionCapUnderConcurrency(t *testing.T) {
	const limit, tries = 100, 200
	url, _ := sessionDevice(t, mcpserver.SessionLimits{MaxSessions: limit, IdleTimeout: time.Minute})
	var opened, refused atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range tries {
		wg.Go(func() {
			<-start
			switch _, err := openSession(http.DefaultClient, url); {
			case err == nil:
				opened.Add(1)
			case strings.HasPrefix(err.Error(), "initialize: 503"):
				refused.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if opened.Load() != limit || refused.Load() != tries-limit {
		t.Errorf("%d sessions opened and %d refused, want %d and %d", opened.Load(), refused.Load(), limit, tries-limit)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", "mcp-session-never-issued")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET under an unknown session: %d, want 404", resp.StatusCode)
	}
}

// A session belongs to the endpoint that created it: another endpoint does
// not know it and cannot end it.
func TestSessionsStayWithTheirEndpoint(t *testing.T) {
	e := pumpSkid(t)
	eps, err := mcpserver.NewEndpoints(e, groupOptions(e, ""))
	if err != nil {
		t.Fatal(err)
	}
	h := mcpserver.NewEndpointsHandler(eps, quietLogger(), mcpserver.SessionLimits{})
	t.Cleanup(func() { h.CloseSessions(context.Background()) })
	base, _ := loopback(t, h)
	own, other := base+eps[0].Path, base+eps[1].Path
	id, err := openSession(http.DefaultClient, own)
	if err != nil {
		t.Fatal(err)
	}
	send := func(method, url string) int {
		t.Helper()
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
		}
		req, err := http.NewRequest(method, url, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Mcp-Session-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if status := send(http.MethodPost, other); status != http.StatusNotFound {
		t.Errorf("the session on another endpoint: %d, want 404", status)
	}
	send(http.MethodDelete, other)
	if status := send(http.MethodPost, own); status != http.StatusOK {
		t.Errorf("after a DELETE on another endpoint: %d, want 200", status)
	}
}

// A session idle past the timeout is released and its client told to
// initialize again (404); one with an open GET stream is in use, not idle;
// an idled-out session's room goes to a new one.
func TestIdleSessionsEnd(t *testing.T) {
	const idle = time.Second
	m, p := loadExample(t)
	_, s := startDevice(t, m, p)
	h := mcpserver.NewEndpointsHandler([]mcpserver.Endpoint{{Path: mcpserver.EndpointPath, Server: s}}, quietLogger(), mcpserver.SessionLimits{MaxSessions: 2, IdleTimeout: idle})
	base, _ := loopback(t, h)
	t.Cleanup(func() { h.CloseSessions(context.Background()) })
	url := base + mcpserver.EndpointPath
	stream := &streamOpened{RoundTripper: http.DefaultTransport, open: make(chan struct{})}
	listening, err := dial(t, url, transport.WithContinuousListening(), transport.WithHTTPBasicClient(&http.Client{Transport: stream}))
	if err != nil {
		t.Fatal(err)
	}
	select { // its stream keeps it busy from then on
	case <-stream.open:
	case <-time.After(20 * time.Second):
		t.Fatal("the GET stream did not open within 20 s")
	}
	quiet, err := dial(t, url)
	if err != nil {
		t.Fatal(err)
	}
	asked := time.Now() // before the session's last request
	if _, err := quiet.ListTools(context.Background(), mcp.ListToolsRequest{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); h.OpenSessions() == 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no session released 20 s after the quiet one's last request")
		}
	}
	if quietFor := time.Since(asked); quietFor < idle {
		t.Errorf("a session released %v after the quiet one's last request, before its %v idle timeout", quietFor, idle)
	}
	if n := h.OpenSessions(); n != 1 {
		t.Errorf("%d sessions open after the quiet one idled out, want the listening one", n)
	}
	if _, err := quiet.ListTools(context.Background(), mcp.ListToolsRequest{}); !errors.Is(err, transport.ErrSessionTerminated) {
		t.Errorf("idle session: %v, want session terminated", err)
	}
	if _, err := listening.ListTools(context.Background(), mcp.ListToolsRequest{}); err != nil {
		t.Errorf("session with an open stream: %v", err)
	}
	if _, err := dial(t, url); err != nil {
		t.Errorf("a new session in the released one's room: %v", err)
	}
}

// streamOpened closes open when a GET is answered with its event stream,
// which the server does once it serves the stream.
type streamOpened struct {
	http.RoundTripper
	once sync.Once
	open chan struct{}
}

func (s *streamOpened) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.RoundTripper.RoundTrip(r)
	if err == nil && r.Method == http.MethodGet && resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		s.once.Do(func() { close(s.open) })
	}
	return resp, err
}

// A call answered long after its body's deadline (a person approving it over
// the POST's SSE stream) is not cut by that deadline, as it would be by a
// WriteTimeout or a request context bounded by it.
func TestSlowAnswerOutlivesBodyDeadline(t *testing.T) {
	policy, err := os.ReadFile("testdata/access/approval.policy.yml")
	if err != nil {
		t.Fatal(err)
	}
	const bodyTimeout = 200 * time.Millisecond
	d, h := newAccessDevice(t, string(policy), nil, nil, mcpserver.Access{BodyTimeout: bodyTimeout})
	d.url, _ = loopback(t, h)
	slow := &person{answer: func(p mcp.ElicitationParams) *mcp.ElicitationResult {
		time.Sleep(3 * bodyTimeout)
		return answering(mcp.ElicitationResponseActionAccept, true)(p)
	}}
	c := d.connect(t, nil, nil, client.WithElicitationHandler(slow), client.WithProtocolVersion(mcp.ProtocolVersion20250618))
	res, err := callDo(t, c, "do_boiler_setpoint", map[string]any{"value": 55})
	if err != nil || res.IsError {
		t.Fatalf("approved after %s: %v %v", 3*bodyTimeout, err, res)
	}
	if n := d.bus.writes.Load(); n != 1 {
		t.Errorf("%d writes, want 1", n)
	}
}

// stalledConns is how many connections the stalled-body test opens: 2,000
// when the descriptor limit allows both their ends.
func stalledConns(t *testing.T) int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	n := min(2000, (int(lim.Cur)-200)/2)
	if n < 2000 {
		t.Logf("RLIMIT_NOFILE %d: %d connections", lim.Cur, n)
	}
	return n
}

// stall opens n connections to addr that each send a request's headers and
// the start of its 1000-byte body, and nothing more.
func stall(t *testing.T, addr string, n int, headers string) []net.Conn {
	t.Helper()
	req := "POST " + mcpserver.EndpointPath + " HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\n" +
		"Content-Length: 1000\r\n" + headers + "\r\n" + `{"jsonrpc":"2.0",`
	conns := make([]net.Conn, n)
	var next atomic.Int64
	errs := make(chan error, 32)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				c, err := net.Dial("tcp", addr)
				if err == nil {
					conns[i] = c
					_, err = io.WriteString(c, req)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return conns
}

// Stalled bodies hold no connection (so no descriptor) past their deadline:
// an unauthenticated request is answered 401 without its body being read
// and let go within a second, long before the body deadline; an
// authenticated one gets 408 at the body deadline.
func TestStalledBodiesHoldNoConnections(t *testing.T) {
	n := stalledConns(t)
	cases := []struct {
		name        string
		headers     string
		bodyTimeout time.Duration
		status      int
		within      time.Duration // after the last connection was opened
	}{
		{"unauthenticated", "", time.Minute, http.StatusUnauthorized, 10 * time.Second},
		{"authenticated", "Authorization: Bearer operator-token\r\n", time.Second, http.StatusRequestTimeout, 10 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, h := newAccessDevice(t, authPolicy(t), map[string]string{"jwt.key": jwtSecret + "\n"}, nil, mcpserver.Access{BodyTimeout: c.bodyTimeout})
			base, open := loopback(t, h)
			conns := stall(t, strings.TrimPrefix(base, "http://"), n, c.headers)
			opened := time.Now()
			for open.Load() > 0 {
				if time.Since(opened) > c.within {
					t.Fatalf("%d of %d connections still open %s after the last was opened", open.Load(), n, c.within)
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("%d stalled connections, all closed by the server %s after the last was opened", n, time.Since(opened).Round(time.Millisecond))
			for i, conn := range conns {
				if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Fatalf("connection %d: %v", i, err)
				}
				resp.Body.Close()
				if resp.StatusCode != c.status {
					t.Fatalf("connection %d: status %d, want %d", i, resp.StatusCode, c.status)
				}
			}
		})
	}
}
