// Command baremcp is the bare mcp-go baseline of bench/compare: one tool with
// physmcpd's name and schemas that answers a fixed body, as a plain mcp-go
// server would (the body marshalled per call, as structured content and as
// text), over streamable HTTP at /mcp. With -validate, mcp-go checks input
// and output against the schemas. It has none of physmcpd's work: no access
// checks, no engine, no device. With -modbus it also has the tool NAME_live,
// which reads holding register 0 of unit 1 there with a bare goburrow client
// before answering: the uncached read's baseline (bench/compare uncached).
// With -stdio it serves stdin and stdout (mcp-go's stdio server) instead of
// HTTP.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	gb "github.com/goburrow/modbus"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Tool is what the -tool file holds: a tool definition and the body to answer.
type Tool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema"`
	Body         json.RawMessage `json:"body"`
}

func main() {
	toolFile := flag.String("tool", "", "JSON file with the tool and its answer")
	validate := flag.Bool("validate", false, "validate input and output against the schemas")
	addr := flag.String("http", "127.0.0.1:0", "listen address")
	device := flag.String("modbus", "", "Modbus TCP device host:port the tool NAME_live reads")
	stdio := flag.Bool("stdio", false, "serve stdin and stdout instead of HTTP")
	flag.Parse()
	if err := run(*toolFile, *validate, *addr, *device, *stdio); err != nil {
		fmt.Fprintln(os.Stderr, "baremcp:", err)
		os.Exit(1)
	}
}

func run(toolFile string, validate bool, addr, device string, stdio bool) error {
	data, err := os.ReadFile(toolFile)
	if err != nil {
		return err
	}
	var t Tool
	if err := json.Unmarshal(data, &t); err != nil {
		return fmt.Errorf("%s: %w", toolFile, err)
	}
	var body map[string]any
	if err := json.Unmarshal(t.Body, &body); err != nil {
		return fmt.Errorf("%s: body: %w", toolFile, err)
	}
	opts := []server.ServerOption{server.WithToolCapabilities(false), server.WithRecovery()}
	if validate {
		opts = append(opts, server.WithInputSchemaValidation(), server.WithOutputSchemaValidation())
	}
	s := server.NewMCPServer("baremcp", "bench", opts...)
	tool := mcp.NewToolWithRawSchema(t.Name, t.Description, t.InputSchema)
	tool.RawOutputSchema = t.OutputSchema
	answer := func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		text, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		return mcp.NewToolResultStructured(body, string(text)), nil
	}
	s.AddTool(tool, answer)
	if device != "" {
		h := gb.NewTCPClientHandler(device)
		h.Timeout, h.SlaveId = time.Second, 1
		defer h.Close()
		c := gb.NewClient(h)
		var mu sync.Mutex // one transaction at a time, as on a bus
		live := mcp.NewToolWithRawSchema(t.Name+"_live", t.Description, t.InputSchema)
		live.RawOutputSchema = t.OutputSchema
		s.AddTool(live, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			mu.Lock()
			_, err := c.ReadHoldingRegisters(0, 1)
			mu.Unlock()
			if err != nil {
				return nil, err
			}
			return answer(ctx, req)
		})
	}
	if stdio {
		return server.ServeStdio(s)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Printf("listening %s\n", ln.Addr())
	mux := http.NewServeMux()
	mux.Handle("/mcp", server.NewStreamableHTTPServer(s))
	return http.Serve(ln, mux)
}
