//go:build !lite

package mcpserver_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/physmcp/physmcpd/mcpserver"
)

// A notifications/cancelled for the call the reader runs itself (a lone
// call) reaches it: the goroutine that took over the reading reads it.
func TestStreamCancelsTheCallTheReaderRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBlockingTools()
		ended := make(chan error, 1)
		b.s.AddTool(mcp.NewTool("wait"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			<-ctx.Done()
			ended <- ctx.Err()
			return nil, ctx.Err()
		})
		send, _, in, served := b.serve(t, mcpserver.StreamLimits{Workers: 1})
		send(callBody("1", `{"name":"wait"}`))
		send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"test"}}`)
		select {
		case err := <-ended:
			if err != context.Canceled {
				t.Errorf("the call ended with %v, want context.Canceled", err)
			}
		default:
			t.Fatal("the call the reader runs was not cancelled")
		}
		in.Close()
		if err := <-served; err != nil {
			t.Fatal(err)
		}
	})
}

// A panic in the handler of the call the reader runs is that call's error
// (mcp-go's recovery, which New configures): the session reads and answers
// the next call, and ends when its input does.
func TestStreamPanicInTheReadersCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBlockingTools()
		b.s = server.NewMCPServer("t", "0", server.WithToolCapabilities(false), server.WithRecovery())
		b.s.AddTool(mcp.NewTool("boom"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			panic("handler bug")
		})
		b.s.AddTool(mcp.NewTool("quick"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("quick"), nil
		})
		send, answers, in, served := b.serve(t, mcpserver.StreamLimits{Workers: 1})
		send(callBody("1", `{"name":"boom"}`))
		if a := <-answers; !strings.Contains(a, `"id":1`) || !strings.Contains(a, "panic") {
			t.Fatalf("answer %s, want call 1's panic as its error", a)
		}
		send(callBody("2", `{"name":"quick"}`))
		if a := <-answers; !strings.Contains(a, `"id":2`) || !strings.Contains(a, "quick") {
			t.Fatalf("answer %s, want call 2's", a)
		}
		in.Close()
		if err := <-served; err != nil {
			t.Fatal(err)
		}
	})
}
