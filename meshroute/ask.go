package meshroute

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/internal/mcpdial"
	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/promcp"
)

// hopFrom reads the hop of a forwarded query from a call's _meta.
func hopFrom(meta map[string]any) (Hop, bool, error) {
	raw, ok := meta[MetaKey]
	if !ok {
		return Hop{}, false, nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return Hop{}, true, fmt.Errorf("_meta %q: %w", MetaKey, err)
	}
	var h Hop
	if err := json.Unmarshal(b, &h); err != nil {
		return Hop{}, true, fmt.Errorf("_meta %q: %w", MetaKey, err)
	}
	if h.QueryID == "" || h.RootQueryID == "" || h.BudgetMs <= 0 || h.TTL < 0 {
		return Hop{}, true, fmt.Errorf("_meta %q needs query_id, root_query_id, ttl ≥ 0 and budget_ms > 0", MetaKey)
	}
	return h, true, nil
}

// HTTPAsker calls peers' can_do over their streamable HTTP MCP endpoints
// with a mesh credential for each peer (never a caller's token). Sessions
// are kept per endpoint, so a query costs one request per peer.
type HTTPAsker struct {
	node string
	keys [][]byte
	now  func() time.Time

	mu      sync.Mutex
	clients map[string]*client.Client // by endpoint
}

// NewHTTPAsker asks peers as node, with credentials signed by keys (the
// mesh keyring).
func NewHTTPAsker(node string, keys [][]byte) *HTTPAsker {
	return &HTTPAsker{node: node, keys: keys, now: time.Now, clients: map[string]*client.Client{}}
}

// Ask implements Asker.
func (a *HTTPAsker) Ask(ctx context.Context, p mesh.Peer, args map[string]any, hop Hop) (promcp.CapabilityReport, error) {
	if p.Endpoint == "" {
		return promcp.CapabilityReport{}, errors.New("the peer advertises no MCP endpoint")
	}
	c, err := a.client(ctx, p)
	if err != nil {
		return promcp.CapabilityReport{}, err
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = "can_do"
	req.Params.Arguments = args
	req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{MetaKey: hop}}
	res, err := c.CallTool(ctx, req)
	if err != nil {
		if ctx.Err() == nil {
			a.drop(p.Endpoint, c) // a broken session: the next query opens a new one
		} else {
			err = fmt.Errorf("%w: %v", context.DeadlineExceeded, err)
		}
		return promcp.CapabilityReport{}, err
	}
	var rep promcp.CapabilityReport
	if err := decodeReport(res, &rep); err != nil {
		return rep, fmt.Errorf("%s answered can_do with %w", p.DeviceID, err)
	}
	return rep, nil
}

func decodeReport(res *mcp.CallToolResult, rep *promcp.CapabilityReport) error {
	var raw []byte
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return err
		}
		raw = b
	} else {
		for _, c := range res.Content {
			if t, ok := c.(mcp.TextContent); ok {
				raw = []byte(t.Text)
				break
			}
		}
	}
	if res.IsError {
		return fmt.Errorf("an error: %s", raw)
	}
	if err := json.Unmarshal(raw, rep); err != nil {
		return fmt.Errorf("no CapabilityReport: %v", err)
	}
	return nil
}

func (a *HTTPAsker) client(ctx context.Context, p mesh.Peer) (*client.Client, error) {
	a.mu.Lock()
	c := a.clients[p.Endpoint]
	a.mu.Unlock()
	if c != nil {
		return c, nil
	}
	audience := p.DeviceID
	c, err := mcpdial.HTTP(ctx, p.Endpoint, "physmcpd-mesh", func(context.Context) map[string]string {
		tok, _, err := auth.MeshCredential(a.keys, a.node, audience, a.now())
		if err != nil {
			return nil
		}
		return map[string]string{"Authorization": "Bearer " + tok}
	})
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if old := a.clients[p.Endpoint]; old != nil { // another query connected meanwhile
		go c.Close()
		return old, nil
	}
	a.clients[p.Endpoint] = c
	return c, nil
}

func (a *HTTPAsker) drop(endpoint string, c *client.Client) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.clients[endpoint] == c {
		delete(a.clients, endpoint)
		go c.Close()
	}
}

// Close ends every session.
func (a *HTTPAsker) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for ep, c := range a.clients {
		c.Close()
		delete(a.clients, ep)
	}
}
