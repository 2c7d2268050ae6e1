//go:build !lite

package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/internal/syncbuf"
	"github.com/physmcp/physmcpd/mcpserver"
)

// streamClient is mcp-go's client on a stream session of s (ServeStream on
// a pair of pipes, as on stdio or a serial line).
func streamClient(t *testing.T, s *server.MCPServer, opts ...client.ClientOption) *client.Client {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- mcpserver.ServeStream(ctx, s, inR, outW, mcpserver.StreamLimits{})
		outW.Close()
	}()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		if err := <-served; err != nil {
			t.Errorf("ServeStream: %v", err)
		}
	})
	c := client.NewClient(transport.NewIO(outR, inW, io.NopCloser(strings.NewReader(""))), opts...)
	start(t, c)
	return c
}

// Over a stream as in process: a failed call is told to the session at the
// level it set (logging/setLevel kept by the stream's session, the message
// sent as a notification on the stream), in both protocol eras.
func TestStreamSessionLogs(t *testing.T) {
	for name, opts := range map[string][]client.ClientOption{"2025-11-25": {client.WithLegacyProtocolOnly()}, "2026-07-28": nil} {
		t.Run(name, func(t *testing.T) {
			failedCallLog(t, streamClient(t, startTank(t, "operator").s, opts...))
		})
	}
}

// A subscription's updates reach a stream client as notifications.
func TestStreamSessionSubscribes(t *testing.T) {
	d := startTank(t, "supervisor")
	c := streamClient(t, d.s, client.WithLegacyProtocolOnly())
	ch := updates(c)
	if err := subscribe(c, levelURI); err != nil {
		t.Fatal(err)
	}
	d.set(t, c, 42)
	if r := nextUpdate(t, ch, levelURI); r["value"] != 42.0 {
		t.Errorf("update %v, want the level 42", r)
	}
}

// slowDevice reads its level from a simulated Modbus device that takes
// 20 ms to answer, every time (not cacheable).
const slowDevice = `physmcp_version: "0.1"
device: {id: slow_01, type: tank}
buses:
  mb: {type: modbus-tcp, address: "127.0.0.1:1502", simulated: true, simulation: {latency_ms: 20}}
capabilities:
  - {name: level, kind: read, description: Tank level., data_type: float, unit: cm, semantic_tags: [tank, level],
     binding: {bus: mb, unit: 1, table: input, address: 0, data_type: uint16}, cacheable: false, simulation: {initial: 40}}
`

// The stream's own duties, line by line: answers go to their requests by
// id whatever order they finish in, a line that is not JSON gets a parse
// error, a ping an empty result, a notification and an answer from the
// client nothing; the end of the input still answers the calls read (each
// takes 20 ms, so most are waiting or running when the input ends).
func TestStreamLines(t *testing.T) {
	dir := t.TempDir()
	manifestPath, policyPath := filepath.Join(dir, "m.yml"), filepath.Join(dir, "p.yml")
	if os.WriteFile(manifestPath, []byte(slowDevice), 0o644) != nil ||
		os.WriteFile(policyPath, []byte("physmcp_policy_version: \"0.1\"\nidentity: {local_role: operator}\n"), 0o644) != nil {
		t.Fatal("cannot write the device")
	}
	m, p := loadDevice(t, manifestPath, policyPath)
	_, s := startDevice(t, m, p)
	var in strings.Builder
	in.WriteString(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}` + "\n")
	in.WriteString(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n\n")
	in.WriteString("this is not JSON\n")
	in.WriteString(`{"jsonrpc":"2.0","id":"p","method":"ping"}` + "\n")
	in.WriteString(`{"jsonrpc":"2.0","id":77,"result":{}}` + "\n") // an answer to nothing the server asked
	for id := 10; id < 30; id++ {
		in.WriteString(`{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"tools/call","params":{"name":"read_level","arguments":{}}}` + "\r\n")
	}
	var out syncbuf.Buffer
	if err := mcpserver.ServeStream(context.Background(), s, strings.NewReader(in.String()), &out, mcpserver.StreamLimits{Workers: 3, Queue: 2}); err != nil {
		t.Fatal(err)
	}
	byID := map[string]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var msg map[string]any
		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		id, _ := json.Marshal(msg["id"])
		if _, dup := byID[string(id)]; dup {
			t.Errorf("two answers to id %s", id)
		}
		byID[string(id)] = msg
	}
	if len(byID) != 1+1+1+20 {
		t.Errorf("%d answers, want 23 (initialize, the parse error, ping, 20 calls):\n%s", len(byID), out.String())
	}
	if e, _ := byID["null"]["error"].(map[string]any); e == nil || e["code"] != float64(mcp.PARSE_ERROR) {
		t.Errorf("the line that is not JSON: %v", byID["null"])
	}
	if r, ok := byID[`"p"`]["result"].(map[string]any); !ok || len(r) != 0 {
		t.Errorf("ping: %v", byID[`"p"`])
	}
	for id := 10; id < 30; id++ {
		msg := byID[strconv.Itoa(id)]
		res, _ := msg["result"].(map[string]any)
		if sc, _ := res["structuredContent"].(map[string]any); sc["quality"] != "good" || sc["value"] != 40.0 {
			t.Errorf("call %d: %v", id, msg)
		}
	}
}

// A line longer than the limit ends the session with ErrMessageTooLong,
// found before the line is all read.
func TestStreamRefusesOverlongMessages(t *testing.T) {
	m, p := loadExample(t)
	_, s := startDevice(t, m, p)
	in := io.MultiReader(strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`+"\n"), endless{})
	var out syncbuf.Buffer
	err := mcpserver.ServeStream(context.Background(), s, in, &out, mcpserver.StreamLimits{MaxMessageBytes: 1024})
	if !errors.Is(err, mcpserver.ErrMessageTooLong) {
		t.Errorf("ServeStream: %v, want ErrMessageTooLong", err)
	}
	if !strings.Contains(out.String(), `"id":1`) {
		t.Errorf("the ping before the long line was not answered: %q", out.String())
	}
}

// endless is a line that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// rawStream is a stream session of s that the test writes lines to.
type rawStream struct {
	t      *testing.T
	in     *io.PipeWriter
	lines  chan string // everything s wrote, in order
	seen   []string
	served chan error
}

func newRawStream(t *testing.T, s *server.MCPServer) *rawStream {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	r := &rawStream{t: t, in: inW, lines: make(chan string, 256), served: make(chan error, 1)}
	go func() {
		r.served <- mcpserver.ServeStream(context.Background(), s, inR, outW, mcpserver.StreamLimits{})
		outW.Close()
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
	}()
	return r
}

// send writes line; with an id, it waits for the line that answers it.
func (r *rawStream) send(line, id string) {
	r.t.Helper()
	if _, err := io.WriteString(r.in, line+"\n"); err != nil {
		r.t.Fatal(err)
	}
	var want any
	if id != "" && json.Unmarshal([]byte(id), &want) != nil {
		r.t.Fatalf("id %s", id)
	}
	for id != "" {
		select {
		case l := <-r.lines:
			r.seen = append(r.seen, l)
			var answer struct {
				ID     any
				Method string
			}
			if json.Unmarshal([]byte(l), &answer) == nil && answer.Method == "" && reflect.DeepEqual(answer.ID, want) {
				return
			}
		case <-time.After(5 * time.Second):
			r.t.Fatalf("no answer to %s", line)
		}
	}
}

// end closes the input and returns every line s wrote, sorted.
func (r *rawStream) end() []string {
	r.in.Close()
	if err := <-r.served; err != nil {
		r.t.Fatal(err)
	}
	for l := range r.lines {
		r.seen = append(r.seen, l)
	}
	slices.Sort(r.seen)
	return r.seen
}

// read_* calls on a stream are answered on the fast path (fastread.go)
// exactly as mcp-go answers them: the same requests to two tanks on clocks
// that agree, one without the fast path, answered byte for byte alike,
// log messages included (a refused do_*, a read of a device that is away).
func TestStreamFastReadsAnswerAsMCPGo(t *testing.T) {
	twins := fastTwins(t, false)
	mcpserver.DisableStreamFastReads(twins[1].server)
	var got [2][]string
	for i, d := range twins {
		r := newRawStream(t, d.server)
		r.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`, "0")
		r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, "")
		for _, step := range fastSteps {
			if step.method != "" || step.headers != nil {
				continue
			}
			var head struct{ ID, Result json.RawMessage }
			if json.Unmarshal([]byte(step.body), &head) != nil || head.ID == nil || string(head.ID) == "null" ||
				head.Result != nil && string(head.Result) != "null" {
				r.send(step.body, "") // answered with id null, or not at all (a response)
				continue
			}
			r.send(step.body, string(head.ID))
		}
		r.send(`{"jsonrpc":"2.0","id":40,"method":"logging/setLevel","params":{"level":"warning"}}`, "40")
		r.send(callBody("41", `{"name":"do_inflow","arguments":{"value":99,"idempotency_key":"k41"}}`), "41")
		d.bus.SetOffline(true)
		d.clk.Advance(time.Minute) // past the level's cache TTL
		r.send(callBody("42", `{"name":"read_level"}`), "42")
		got[i] = r.end()
	}
	if !slices.Equal(got[0], got[1]) {
		t.Errorf("the fast path answered\n%s\nmcp-go answered\n%s", strings.Join(got[0], "\n"), strings.Join(got[1], "\n"))
	}
	if n := mcpserver.StreamFastReadsServed(twins[0].server); n < 10 {
		t.Errorf("the fast path answered %d calls", n)
	}
	if logs := slices.DeleteFunc(slices.Clone(got[0]), func(l string) bool { return !strings.Contains(l, `"notifications/message"`) }); len(logs) < 2 {
		t.Errorf("log messages %q; want the refused do_* and the device that is away", logs)
	}
}

// notifications/cancelled ends a read on the stream's fast path as mcp-go
// ends its own: a read waiting for another's transaction returns at once.
func TestStreamFastReadCancelled(t *testing.T) {
	twins := fastTwins(t, false)
	mcpserver.DisableStreamFastReads(twins[1].server)
	var got [2][]string
	for i, d := range twins {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		served := make(chan error, 1)
		go func() {
			served <- mcpserver.ServeStream(context.Background(), d.server, inR, outW, mcpserver.StreamLimits{})
			outW.Close()
		}()
		answers := make(chan string, 8)
		go func() {
			sc := bufio.NewScanner(outR)
			for sc.Scan() {
				answers <- sc.Text()
			}
			close(answers)
		}()
		send := func(line string) {
			if _, err := io.WriteString(inW, line+"\n"); err != nil {
				t.Fatal(err)
			}
		}
		send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
		send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		got[i] = append(got[i], <-answers)
		d.hanging.hang.Store(true)
		send(callBody(`"r1"`, `{"name":"read_level"}`))
		<-d.hanging.entered
		send(callBody(`"r2"`, `{"name":"read_level"}`))
		// r2 is cancelled once it waits for r1's transaction: a cancellation
		// read before r2 is under way names no call, so it is sent again
		// until r2 is answered.
		deadline := time.After(5 * time.Second)
	cancelling:
		for {
			send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"r2","reason":"test"}}`)
			select {
			case a := <-answers:
				got[i] = append(got[i], a)
				break cancelling
			case <-time.After(20 * time.Millisecond):
			case <-deadline:
				close(d.hanging.released)
				t.Fatal("a read went on waiting after notifications/cancelled")
			}
		}
		close(d.hanging.released)
		got[i] = append(got[i], <-answers)
		inW.Close()
		if err := <-served; err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(got[0], got[1]) {
		t.Errorf("the fast path answered\n%s\nmcp-go answered\n%s", strings.Join(got[0], "\n"), strings.Join(got[1], "\n"))
	}
	if !strings.Contains(got[0][1], `"r2"`) {
		t.Errorf("the first answer after the cancellation: %s", got[0][1])
	}
	if n := mcpserver.StreamFastReadsServed(twins[0].server); n != 2 {
		t.Errorf("the fast path answered %d reads, want both", n)
	}
}
