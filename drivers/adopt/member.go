package adopt

import (
	"context"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// What an aggregator over the mesh needs of a bus to one of the mesh's
// devices: it authenticates with the mesh credential, lists the device's
// tools whenever the device joins or changes, and knows from the membership
// when the device is away.

// Authenticate makes b send header's headers with every HTTP request,
// instead of token_file's token: the mesh credential, minted per request
// because it expires. Call it before b is used.
func (b *Bus) Authenticate(header transport.HTTPHeaderFunc) { b.header = header }

// ListTools lists the source's tools, connecting when needed; one attempt.
func (b *Bus) ListTools(ctx context.Context) ([]mcp.Tool, error) { return b.tools(ctx) }

// SetOffline says the source is known to be away, and why (nil: it may
// answer). While it is away nothing is sent: every call fails at once with
// why, its readings go stale as for a lost source, and can_do blocks its
// capabilities (drivers.Liveness). When it may answer again, the next call
// connects at once, without waiting out the backoff of the failures meanwhile.
func (b *Bus) SetOffline(why error) {
	if why != nil {
		if b.away.Swap(&why) == nil {
			b.logger.Warn("adopted source away", "bus", b.name, "source", b.Describe(), "why", why)
		}
		b.markLost()
		b.mu.Lock()
		c := b.conn
		b.conn = nil
		b.mu.Unlock()
		if c != nil {
			go c.Close()
		}
		return
	}
	if b.away.Swap(nil) == nil {
		return
	}
	b.logger.Info("adopted source back", "bus", b.name, "source", b.Describe())
	b.mu.Lock()
	b.nextTry, b.wait = time.Time{}, retryFirst
	b.mu.Unlock()
}

// offline is why the source is known to be away, or nil.
func (b *Bus) offline() error {
	if why := b.away.Load(); why != nil {
		return *why
	}
	return nil
}

// Offline implements drivers.Liveness.
func (p *point) Offline() error { return p.bus.offline() }
