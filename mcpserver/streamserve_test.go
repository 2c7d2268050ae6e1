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
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

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
	var out syncBuffer
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
	var out syncBuffer
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

// syncBuffer is a strings.Builder the stream's writers may share.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
