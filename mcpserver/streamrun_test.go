//go:build !lite

package mcpserver_test

import (
	"bufio"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/mcpserver"
)

// blockingTools is an mcp-go server whose tool "block" waits until released
// (one release a call) and "quick" answers at once; it counts the calls of
// block running and the most that ever ran at once.
type blockingTools struct {
	s       *server.MCPServer
	release chan struct{}

	mu            sync.Mutex
	running, most int
	entered       int
}

func newBlockingTools() *blockingTools {
	b := &blockingTools{s: server.NewMCPServer("t", "0", server.WithToolCapabilities(false)), release: make(chan struct{})}
	b.s.AddTool(mcp.NewTool("block"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		b.mu.Lock()
		b.running++
		b.entered++
		b.most = max(b.most, b.running)
		b.mu.Unlock()
		<-b.release
		b.mu.Lock()
		b.running--
		b.mu.Unlock()
		return mcp.NewToolResultText("released"), nil
	})
	b.s.AddTool(mcp.NewTool("quick"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("quick"), nil
	})
	return b
}

func (b *blockingTools) counts() (running, most, entered int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.running, b.most, b.entered
}

// streamSession serves b on a pair of pipes in the bubble and returns a
// function that sends a line, the answers as they come, the client's end of
// the input and ServeStream's result.
func (b *blockingTools) serve(t *testing.T, lim mcpserver.StreamLimits) (send func(string), answers <-chan string, in io.Closer, served <-chan error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- mcpserver.ServeStream(context.Background(), b.s, inR, outW, lim)
		outW.Close()
	}()
	out := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			out <- sc.Text()
		}
		close(out)
	}()
	lines := make(chan string, 16) // sent in order by one writer: a pipe write waits for the read
	go func() {
		for line := range lines {
			_, _ = io.WriteString(inW, line+"\n")
		}
		inW.Close()
	}()
	send = func(line string) {
		lines <- line
		time.Sleep(time.Second) // the bubble's clock: a while for the server, whatever it waits for
		synctest.Wait()
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if a := <-out; !strings.Contains(a, `"id":0`) {
		t.Fatalf("initialize: %s", a)
	}
	return send, out, closer(func() { close(lines) }), done
}

type closer func()

func (c closer) Close() error { c(); return nil }

// A call that arrives alone is run by the stream's reader, which hands the
// reading to another goroutine once the call has taken a while: a call or a
// notification sent meanwhile is still read and answered.
func TestStreamCallRunByTheReaderLetsOthersThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBlockingTools()
		send, answers, in, served := b.serve(t, mcpserver.StreamLimits{Workers: 2})
		send(callBody("1", `{"name":"block"}`))
		if running, _, _ := b.counts(); running != 1 {
			t.Fatalf("%d calls of block running, want 1", running)
		}
		send(callBody("2", `{"name":"quick"}`))
		select {
		case a := <-answers:
			if !strings.Contains(a, `"id":2`) || !strings.Contains(a, "quick") {
				t.Fatalf("the first answer: %s, want the quick call's while the first still runs", a)
			}
		default:
			t.Fatal("a call sent while another ran was not answered within a second")
		}
		in.Close()
		synctest.Wait()
		select {
		case err := <-served:
			t.Fatalf("the stream ended (%v) before the call it had read was answered", err)
		default:
		}
		b.release <- struct{}{}
		if a := <-answers; !strings.Contains(a, `"id":1`) || !strings.Contains(a, "released") {
			t.Fatalf("answer %s, want the released call's", a)
		}
		if err := <-served; err != nil {
			t.Fatal(err)
		}
	})
}

// StreamLimits.Workers bounds the calls running at once, the one the reader
// runs itself included.
func TestStreamRunsAtMostWorkersCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBlockingTools()
		send, answers, in, served := b.serve(t, mcpserver.StreamLimits{Workers: 2, Queue: 4})
		for _, id := range []string{"1", "2", "3", "4"} {
			send(callBody(id, `{"name":"block"}`))
		}
		if running, most, _ := b.counts(); running != 2 || most != 2 {
			t.Fatalf("%d calls running (at most %d at once), want 2", running, most)
		}
		for range 4 {
			b.release <- struct{}{}
			<-answers
		}
		if _, most, entered := b.counts(); most != 2 || entered != 4 {
			t.Errorf("%d calls ran, at most %d at once; want 4, at most 2", entered, most)
		}
		in.Close()
		if err := <-served; err != nil {
			t.Fatal(err)
		}
	})
}
