package lint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// Target says how to reach a server: a command line for stdio, or the URL of
// a streamable HTTP endpoint (with extra headers, e.g. Authorization).
type Target struct {
	Command []string
	Env     []string // added to the linter's own environment for the command
	URL     string
	Headers map[string]string
}

// Dial connects to the target and completes the MCP handshake.
func Dial(ctx context.Context, t Target) (Session, error) {
	var (
		c   *client.Client
		err error
	)
	switch {
	case len(t.Command) > 0:
		c, err = client.NewStdioMCPClient(t.Command[0], t.Env, t.Command[1:]...)
	case t.URL != "":
		c, err = client.NewStreamableHttpClient(t.URL, transport.WithHTTPHeaders(t.Headers))
		if err == nil {
			err = c.Start(ctx)
		}
	default:
		return nil, errors.New("no server: give a command or a URL")
	}
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	init := mcp.InitializeRequest{}
	// The handshake era: its tools/list is the classic request the linter sends raw.
	init.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	init.Params.ClientInfo = mcp.Implementation{Name: "physmcpd-lint", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		c.Close()
		return nil, fmt.Errorf("initialize: %w%s", err, stderrTail(c))
	}
	return &mcpSession{c: c}, nil
}

type mcpSession struct {
	c     *client.Client
	calls int
}

// ListTools asks tools/list raw: mcp-go's typed Tool drops schema keywords
// (anyOf, descriptions at the top level) the rules look at.
func (s *mcpSession) ListTools(ctx context.Context) ([]Tool, error) {
	var all []json.RawMessage
	cursor := ""
	for {
		s.calls++
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		resp, err := s.c.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{
			JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(fmt.Sprintf("lint-%d", s.calls)),
			Method: string(mcp.MethodToolsList), Params: params,
		})
		if err != nil {
			return nil, fmt.Errorf("tools/list: %w", err)
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("tools/list: %d %s", resp.Error.Code, resp.Error.Message)
		}
		var page struct {
			Tools      []json.RawMessage `json:"tools"`
			NextCursor string            `json:"nextCursor"`
		}
		if err := json.Unmarshal(resp.Result, &page); err != nil {
			return nil, fmt.Errorf("tools/list: %w", err)
		}
		all = append(all, page.Tools...)
		if page.NextCursor == "" || page.NextCursor == cursor {
			break
		}
		cursor = page.NextCursor
	}
	raw, err := json.Marshal(all)
	if err != nil {
		return nil, err
	}
	return ParseToolList(raw)
}

func (s *mcpSession) CallTool(ctx context.Context, name string, args map[string]any) (any, bool, error) {
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := s.c.CallTool(ctx, req)
	if err != nil {
		return nil, false, err
	}
	raw := []byte(res.RawStructuredContent)
	if len(raw) == 0 && res.StructuredContent != nil {
		if raw, err = json.Marshal(res.StructuredContent); err != nil {
			return nil, res.IsError, err
		}
	}
	if len(raw) == 0 {
		for _, c := range res.Content {
			if text, ok := c.(mcp.TextContent); ok && strings.HasPrefix(strings.TrimSpace(text.Text), "{") {
				raw = []byte(text.Text)
				break
			}
		}
	}
	if len(raw) == 0 {
		return nil, res.IsError, nil
	}
	var body any
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, res.IsError, nil
	}
	return body, res.IsError, nil
}

// stderrTail is the last of what a stdio server wrote to stderr, which
// usually says why it stopped.
func stderrTail(c *client.Client) string {
	r, ok := client.GetStderr(c)
	if !ok {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(r, 64<<10))
	text := strings.TrimSpace(string(b))
	if len(text) > 2000 {
		text = "..." + text[len(text)-2000:]
	}
	if text == "" {
		return ""
	}
	return "; the server said:\n" + text
}

func (s *mcpSession) Close() error { return s.c.Close() }

// SplitCommand splits a command line on spaces, keeping quoted parts
// ('...' or "...") together; no other shell syntax is interpreted.
func SplitCommand(line string) ([]string, error) {
	var (
		args  []string
		cur   strings.Builder
		quote rune
		inArg bool
	)
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inArg = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteRune(r)
			inArg = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote in %q", quote, line)
	}
	if inArg {
		args = append(args, cur.String())
	}
	if len(args) == 0 {
		return nil, errors.New("empty command")
	}
	return args, nil
}
