package adopt

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// linePeer is the source's end of a line: the test reads what the client
// sent and writes what the source says.
type linePeer struct {
	t     *testing.T
	conn  net.Conn
	r     *bufio.Reader
	ended chan error // what the client told its onEnd
}

func newLinePair(t *testing.T) (*lineClient, *linePeer) {
	a, b := net.Pipe()
	ended := make(chan error, 1)
	c := newLineClient(a, func(err error) { ended <- err })
	t.Cleanup(func() { c.Close(); b.Close() })
	return c, &linePeer{t: t, conn: b, r: bufio.NewReader(b), ended: ended}
}

// next is the next message the client sent.
func (p *linePeer) next() map[string]any {
	p.t.Helper()
	p.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := p.r.ReadString('\n')
	if err != nil {
		p.t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		p.t.Fatalf("%v: %q", err, line)
	}
	return m
}

func (p *linePeer) say(lines ...string) {
	p.t.Helper()
	for _, l := range lines {
		if _, err := p.conn.Write([]byte(l + "\n")); err != nil {
			p.t.Fatal(err)
		}
	}
}

type callResult struct {
	res *mcp.CallToolResult
	err error
}

func callAsync(c *lineClient, ctx context.Context) <-chan callResult {
	done := make(chan callResult, 1)
	go func() {
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = "read_t", map[string]any{}
		res, err := c.CallTool(ctx, req)
		done <- callResult{res, err}
	}()
	return done
}

// The handshake, then a read: the source's noise, its ping and its
// notification on the way do not disturb the answer, which is decoded into
// the structured map the bus reads.
func TestLineClientCallsATool(t *testing.T) {
	c, peer := newLinePair(t)
	hs := make(chan error, 1)
	go func() { hs <- c.handshake(context.Background(), "physmcpd-proxy") }()
	init := peer.next()
	params, _ := init["params"].(map[string]any)
	if init["method"] != "initialize" || params["protocolVersion"] != mcp.LATEST_LEGACY_PROTOCOL_VERSION ||
		params["clientInfo"].(map[string]any)["name"] != "physmcpd-proxy" {
		t.Fatalf("initialize: %v", init)
	}
	peer.say(`{"jsonrpc":"2.0","id":` + jsonOf(init["id"]) + `,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}`)
	if n := peer.next(); n["method"] != "notifications/initialized" || n["id"] != nil {
		t.Fatalf("after initialize: %v", n)
	}
	if err := <-hs; err != nil {
		t.Fatal(err)
	}

	done := callAsync(c, context.Background())
	call := peer.next()
	if call["method"] != "tools/call" || call["params"].(map[string]any)["name"] != "read_t" {
		t.Fatalf("tools/call: %v", call)
	}
	peer.say("\x00garbage from a line being plugged in",
		`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info"}}`,
		`{"jsonrpc":"2.0","id":"s1","method":"ping"}`)
	if pong := peer.next(); pong["id"] != "s1" || pong["result"] == nil || pong["error"] != nil {
		t.Fatalf("the source's ping answered %v", pong)
	}
	peer.say(`{"jsonrpc":"2.0","id":999,"result":{"content":[]}}`, // asked by nobody
		`{"jsonrpc":"2.0","id":`+jsonOf(call["id"])+`,"result":{"content":[{"type":"text","text":"{\"quality\":\"good\"}"}],"structuredContent":{"quality":"good","value":17.25}}}`)
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	out, err := structured(got.res)
	if err != nil || out["quality"] != "good" || out["value"] != 17.25 {
		t.Fatalf("structured %v %v", out, err)
	}

	// A source without structured content: the text block.
	done = callAsync(c, context.Background())
	call = peer.next()
	peer.say(`{"jsonrpc":"2.0","id":` + jsonOf(call["id"]) + `,"result":{"content":[{"type":"text","text":"{\"quality\":\"stale\"}"}]}}`)
	if got := <-done; got.err != nil {
		t.Fatal(got.err)
	} else if out, err := structured(got.res); err != nil || out["quality"] != "stale" {
		t.Fatalf("from text: %v %v", out, err)
	}
}

// An error answer is the call's error; a call given up (ctx) is forgotten;
// the end of the line fails the calls waiting and every later one, and is
// told to the bus (which then knows the source lost).
func TestLineClientFailures(t *testing.T) {
	c, peer := newLinePair(t)
	done := callAsync(c, context.Background())
	call := peer.next()
	peer.say(`{"jsonrpc":"2.0","id":` + jsonOf(call["id"]) + `,"error":{"code":-32602,"message":"tool 'read_t' not found"}}`)
	if got := <-done; got.err == nil || !strings.Contains(got.err.Error(), "not found") {
		t.Fatalf("error answer: %v", got.err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done = callAsync(c, ctx)
	peer.next()
	if got := <-done; got.err != context.DeadlineExceeded {
		t.Fatalf("unanswered: %v", got.err)
	}
	c.mu.Lock()
	left := len(c.pending)
	c.mu.Unlock()
	if left != 0 {
		t.Errorf("%d calls still pending after their ctx ended", left)
	}

	done = callAsync(c, context.Background())
	peer.next()
	peer.conn.Close() // unplugged
	if got := <-done; got.err == nil || !strings.Contains(got.err.Error(), "the line ended") {
		t.Fatalf("waiting when the line ended: %v", got.err)
	}
	select {
	case err := <-peer.ended:
		if err == nil {
			t.Error("the end of the line told without its cause")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the end of the line was not told")
	}
	if got := <-callAsync(c, context.Background()); got.err == nil {
		t.Fatal("a call after the line ended succeeded")
	}
}

// A source answering in a protocol version MCP does not know is refused.
func TestLineClientRefusesAnUnknownVersion(t *testing.T) {
	c, peer := newLinePair(t)
	hs := make(chan error, 1)
	go func() { hs <- c.handshake(context.Background(), "p") }()
	init := peer.next()
	peer.say(`{"jsonrpc":"2.0","id":` + jsonOf(init["id"]) + `,"result":{"protocolVersion":"1999-01-01"}}`)
	if err := <-hs; err == nil || !strings.Contains(err.Error(), "1999-01-01") {
		t.Fatalf("handshake: %v", err)
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
