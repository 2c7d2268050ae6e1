package adopt

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/internal/ndjson"
)

// session is a connection to a source: mcp-go's client (stdio, HTTP) or a
// lineClient (a serial line).
type session interface {
	CallTool(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error)
	ListTools(ctx context.Context, req mcp.ListToolsRequest) (*mcp.ListToolsResult, error)
	Close() error
}

// maxAnswerBytes bounds one message from a source on a line; a longer one
// is a broken line, and ends the session.
const maxAnswerBytes = 4 << 20

// lineClient is an MCP client on a newline-delimited JSON-RPC stream: the
// serial line of a physmcpd Lite, which is adopted read by read. Each call is
// one encoded request and one write; one reader decodes each answer once
// and hands it to its caller. (mcp-go's client, used before, decoded each
// tools/call answer four times over: a fifth of the proxy's CPU time per
// uncached read, in the profile docs/profiles.md reports.)
type lineClient struct {
	rw io.ReadWriteCloser

	wmu sync.Mutex // one message written at a time

	mu      sync.Mutex
	next    int64
	pending map[int64]chan lineAnswer
	err     error // why the reader stopped: every call fails with it since

	onEnd func(error) // told why, once the reader has stopped
}

type lineAnswer struct {
	result json.RawMessage
	err    error
}

type lineRequest struct {
	JSONRPC string `json:"jsonrpc"`
	ID      *int64 `json:"id,omitempty"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

// newLineClient reads rw's answers until rw ends or is closed, and then
// tells onEnd why (the calls waiting have failed by then).
func newLineClient(rw io.ReadWriteCloser, onEnd func(error)) *lineClient {
	c := &lineClient{rw: rw, pending: map[int64]chan lineAnswer{}, onEnd: onEnd}
	go c.readAnswers(bufio.NewReaderSize(rw, 4096))
	return c
}

// handshake runs initialize and sends initialized, as name, in a protocol
// version that has the handshake.
func (c *lineClient) handshake(ctx context.Context, name string) error {
	params := map[string]any{
		"protocolVersion": mcp.LATEST_LEGACY_PROTOCOL_VERSION,
		"capabilities":    map[string]any{},
		"clientInfo":      mcp.Implementation{Name: name, Version: "1"},
	}
	raw, err := c.request(ctx, "initialize", params)
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	var res struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if !mcp.IsValidProtocolVersion(res.ProtocolVersion) {
		return fmt.Errorf("initialize: %w", mcp.UnsupportedProtocolVersionError{Version: res.ProtocolVersion})
	}
	return c.write(lineRequest{JSONRPC: mcp.JSONRPC_VERSION, Method: string(mcp.MethodNotificationInitialized)})
}

// CallTool calls a tool. Its structured content is decoded once, into the
// map that structured returns; the text block only when there is none.
func (c *lineClient) CallTool(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	raw, err := c.request(ctx, string(mcp.MethodToolsCall), req.Params)
	if err != nil {
		return nil, err
	}
	var res struct {
		Content           json.RawMessage `json:"content"`
		StructuredContent map[string]any  `json:"structuredContent"`
		IsError           bool            `json:"isError"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("tools/call answer: %w", err)
	}
	out := &mcp.CallToolResult{IsError: res.IsError}
	if res.StructuredContent != nil {
		out.StructuredContent = res.StructuredContent
		return out, nil
	}
	var blocks []struct{ Type, Text string }
	if err := json.Unmarshal(res.Content, &blocks); err != nil {
		return nil, fmt.Errorf("tools/call answer: content: %w", err)
	}
	for _, b := range blocks {
		if b.Type == "text" {
			out.Content = append(out.Content, mcp.NewTextContent(b.Text))
		}
	}
	return out, nil
}

// ListTools lists the source's tools (one page: a Lite node has no more).
func (c *lineClient) ListTools(ctx context.Context, _ mcp.ListToolsRequest) (*mcp.ListToolsResult, error) {
	raw, err := c.request(ctx, string(mcp.MethodToolsList), nil)
	if err != nil {
		return nil, err
	}
	var res mcp.ListToolsResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("tools/list answer: %w", err)
	}
	return &res, nil
}

// Close closes the line, which ends the reader and every call waiting.
func (c *lineClient) Close() error { return c.rw.Close() }

// request sends a request and waits for its answer, or ctx.
func (c *lineClient) request(ctx context.Context, method string, params any) (json.RawMessage, error) {
	answer := make(chan lineAnswer, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.next++
	id := c.next
	c.pending[id] = answer
	c.mu.Unlock()
	if err := c.write(lineRequest{JSONRPC: mcp.JSONRPC_VERSION, ID: &id, Method: method, Params: params}); err != nil {
		c.forget(id)
		return nil, err
	}
	select {
	case a := <-answer:
		return a.result, a.err
	case <-ctx.Done():
		c.forget(id)
		return nil, ctx.Err()
	}
}

func (c *lineClient) forget(id int64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// write sends one message and its newline in one write.
func (c *lineClient) write(m lineRequest) error {
	msg, err := json.Marshal(m)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.rw.Write(append(msg, '\n'))
	return err
}

// readAnswers hands each answer to its caller. A line that is not JSON-RPC
// (noise on a line being plugged in) or answers nothing asked is skipped;
// a request from the source is answered (ping) or refused, a notification
// ignored. When the line ends, every call waiting fails.
func (c *lineClient) readAnswers(r *bufio.Reader) {
	var err error
	for {
		var line []byte
		if line, err = ndjson.ReadLine(r, maxAnswerBytes); err != nil {
			break
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(line, &m) != nil || m.ID == nil {
			continue
		}
		if m.Method != "" {
			c.answerSource(m.ID, m.Method)
			continue
		}
		id, perr := strconv.ParseInt(string(m.ID), 10, 64)
		if perr != nil {
			continue
		}
		c.mu.Lock()
		answer, ok := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		switch {
		case !ok:
		case m.Error != nil:
			answer <- lineAnswer{err: fmt.Errorf("%s (JSON-RPC error %d)", m.Error.Message, m.Error.Code)}
		case m.Result == nil:
			answer <- lineAnswer{err: errors.New("an answer with neither result nor error")}
		default:
			answer <- lineAnswer{result: m.Result}
		}
	}
	c.mu.Lock()
	c.err = fmt.Errorf("the line ended: %w", err)
	for id, answer := range c.pending {
		answer <- lineAnswer{err: c.err}
		delete(c.pending, id)
	}
	c.mu.Unlock()
	c.onEnd(c.err)
}

// answerSource answers a request the source sent: ping, as MCP asks of
// both sides; nothing else is offered to it.
func (c *lineClient) answerSource(id json.RawMessage, method string) {
	a := map[string]any{"jsonrpc": mcp.JSONRPC_VERSION, "id": id}
	if method == string(mcp.MethodPing) {
		a["result"] = struct{}{}
	} else {
		a["error"] = map[string]any{"code": mcp.METHOD_NOT_FOUND, "message": "method not found: " + method}
	}
	msg, err := json.Marshal(a)
	if err != nil {
		return
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _ = c.rw.Write(append(msg, '\n')) // a broken line ends the reader too
}
