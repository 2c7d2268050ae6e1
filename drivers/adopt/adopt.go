// Package adopt is the driver of mcp buses: capabilities adopted from
// another MCP server (PhysMCP's proxy entries, binding type virtual). The
// source is a physmcpd Lite on a serial line (newline-delimited JSON-RPC,
// what serve --serial speaks), any MCP server started as a command (stdio)
// or one over streamable HTTP. To the engine an adopted tool is a point like
// a register: its reads keep the source's quality and measurement time, its
// writes carry the caller's idempotency key to the source, and the engine's
// own cache, stale fallback, breaker, policy and audit apply unchanged. The
// MCP client is mcp-go's for stdio and HTTP and a small one of its own on a
// serial line (line.go), where every uncached read is a call; this package
// knows MCP only as the wire protocol of its bus, as drivers/modbus knows
// Modbus.
package adopt

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/internal/mcpdial"
	"github.com/physmcp/physmcpd/internal/serialline"
	"github.com/physmcp/physmcpd/manifest"
)

// Bounds of the wait between connection attempts after a failed one, so a
// source that is away is not dialled (or its command started) on every call.
const (
	retryFirst = 250 * time.Millisecond
	retryMax   = 2 * time.Second
)

// defaultConnectTimeout bounds connecting and initialising without timeout_ms.
const defaultConnectTimeout = 2 * time.Second

// Bus is a connection to one source, made on first use and remade after a
// failure.
type Bus struct {
	name   string
	src    *manifest.MCPBus
	logger *slog.Logger

	mu      sync.Mutex
	conn    session
	closed  bool
	failed  error     // why the latest connection attempt failed
	nextTry time.Time // no attempt before this after a failure
	wait    time.Duration

	// lost is when the source was last seen lost (nil while it answers);
	// read without mu, which is held while connecting.
	lost atomic.Pointer[time.Time]

	// header, when set, authenticates HTTP requests instead of token_file;
	// away, when set, says why the source is known to be away (member.go).
	header transport.HTTPHeaderFunc
	away   atomic.Pointer[error]
}

// Open is the drivers.Opener of mcp buses. It does not contact the source:
// a source that is away makes its capabilities unavailable, not the daemon.
func Open(_ context.Context, m *manifest.Manifest, b *manifest.Bus) (drivers.Bus, error) {
	src := *b.MCP
	if src.TokenFile != "" && !filepath.IsAbs(src.TokenFile) && m.File != "" {
		// relative to the manifest, as write_log is
		src.TokenFile = filepath.Join(filepath.Dir(m.File), src.TokenFile)
	}
	return New(b.Name, &src, slog.Default()), nil
}

// New is a bus to src, named name in messages.
func New(name string, src *manifest.MCPBus, logger *slog.Logger) *Bus {
	if logger == nil {
		logger = slog.Default()
	}
	return &Bus{name: name, src: src, logger: logger, wait: retryFirst}
}

// Describe names the source: "mcp serial /dev/ttyUSB1".
func (b *Bus) Describe() string { return "mcp " + b.src.Protocol() + " " + b.src.Address() }

// Close ends the connection; calls after it fail.
func (b *Bus) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.conn != nil {
		err := b.conn.Close()
		b.conn = nil
		return err
	}
	return nil
}

// client returns the connection, connecting when there is none.
func (b *Bus) client(ctx context.Context) (session, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return nil, fmt.Errorf("%s: %w: closed", b.Describe(), drivers.ErrUnreachable)
	case b.offline() != nil:
		return nil, fmt.Errorf("%s: %w: %v", b.Describe(), drivers.ErrUnreachable, b.offline())
	case b.conn != nil:
		return b.conn, nil
	case time.Now().Before(b.nextTry):
		return nil, fmt.Errorf("%s: %w: %v", b.Describe(), drivers.ErrUnreachable, b.failed)
	}
	timeout := defaultConnectTimeout
	if b.src.TimeoutMs > 0 {
		timeout = time.Duration(b.src.TimeoutMs) * time.Millisecond
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := b.connect(cctx)
	if err != nil {
		if b.failed == nil || b.failed.Error() != err.Error() {
			b.logger.Warn("adopted source unreachable", "bus", b.name, "source", b.Describe(), "err", err)
		}
		b.failed, b.nextTry, b.wait = err, time.Now().Add(b.wait), min(2*b.wait, retryMax)
		b.markLost()
		return nil, fmt.Errorf("%s: %w: %v", b.Describe(), drivers.ErrUnreachable, err)
	}
	if b.failed != nil {
		b.logger.Info("adopted source reachable again", "bus", b.name, "source", b.Describe())
	}
	b.conn, b.failed, b.wait = c, nil, retryFirst
	return c, nil
}

// drop forgets c after a failure on it, so the next call connects anew
// (a serial adapter plugged back, a restarted source).
func (b *Bus) drop(c session, why error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != c {
		return
	}
	b.logger.Warn("adopted source lost; reconnecting on the next call", "bus", b.name, "source", b.Describe(), "err", why)
	b.conn = nil
	b.markLost()
	go c.Close() // a serial port or child process may take a moment to let go
}

// markLost notes now as when the source was lost, unless it is lost already.
func (b *Bus) markLost() {
	now := time.Now()
	b.lost.CompareAndSwap(nil, &now)
}

// lostFor is how long the source has been lost (see drivers.Outage).
func (b *Bus) lostFor() (time.Duration, bool) {
	if at := b.lost.Load(); at != nil {
		return time.Since(*at), true
	}
	return 0, false
}

// ended is called when the incoming stream of connection c ends (a serial
// line whose adapter was unplugged): if c is the current connection, the
// source is lost now, not at the next call.
func (b *Bus) ended(c session, err error) {
	b.mu.Lock()
	current := b.conn
	b.mu.Unlock()
	if current != nil && current == c {
		b.drop(c, err)
	}
}

func (b *Bus) connect(ctx context.Context) (session, error) {
	switch b.src.Protocol() {
	case manifest.SourceSerial:
		port, err := serialline.Open(b.src.Port, b.src.Baud)
		if err != nil {
			return nil, err
		}
		// Bytes left on the line from before (a half-written answer to a
		// connection that was dropped) would be taken for answers.
		_ = port.ResetInputBuffer()
		var c *lineClient
		c = newLineClient(port, func(err error) { b.ended(c, err) })
		if err := c.handshake(ctx, clientName); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	case manifest.SourceStdio:
		tr := transport.NewStdioWithOptions(b.src.Command[0], nil, b.src.Command[1:],
			transport.WithCommandLogger(b.logger), transport.WithCommandStderrWriter(prefixed{os.Stderr, b.name}))
		// The process outlives this call: it is not bound to ctx.
		if err := tr.Start(context.Background()); err != nil {
			return nil, err
		}
		c := client.NewClient(tr)
		if err := mcpdial.Handshake(ctx, c, clientName); err != nil {
			return nil, err
		}
		return c, nil
	default:
		header := b.header
		if header == nil && b.src.TokenFile != "" {
			tok, err := os.ReadFile(b.src.TokenFile)
			if err != nil {
				return nil, fmt.Errorf("token_file: %w", err)
			}
			auth := map[string]string{"Authorization": "Bearer " + strings.TrimSpace(string(tok))}
			header = func(context.Context) map[string]string { return auth }
		}
		c, err := mcpdial.HTTP(ctx, b.src.URL, clientName, header)
		if err != nil {
			return nil, err // not a nil *client.Client in a session
		}
		return c, nil
	}
}

// clientName is how physmcpd introduces itself to the sources it adopts.
const clientName = "physmcpd-proxy"

// prefixed copies a source command's stderr to ours, line by line under
// the bus's name, so its log is not lost and not mistaken for ours.
type prefixed struct {
	w    io.Writer
	name string
}

func (p prefixed) Write(b []byte) (int, error) {
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line != "" {
			fmt.Fprintf(p.w, "[%s] %s", p.name, line)
		}
	}
	return len(b), nil
}

// sent says how far a failed call got.
type sent bool

// call calls a tool of the source and returns its structured result. On
// failure, sent tells whether the request may have reached the source (a
// write is then in doubt).
func (b *Bus) call(ctx context.Context, tool string, args map[string]any) (map[string]any, sent, error) {
	c, err := b.client(ctx)
	if err != nil {
		return nil, false, err
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		// No answer in time (an unplugged line gives no error until written
		// to), a broken connection, or an error answer from a source that
		// may have restarted and forgotten the session: a fresh connection
		// is the safe next step in every case.
		b.drop(c, err)
		if ctx.Err() != nil {
			return nil, true, fmt.Errorf("%s %s: %w: %v", b.Describe(), tool, drivers.ErrTimeout, err)
		}
		return nil, true, fmt.Errorf("%s %s: %w: %v", b.Describe(), tool, drivers.ErrUnreachable, err)
	}
	b.lost.Store(nil) // it answered
	out, perr := structured(res)
	if perr != nil {
		return nil, true, fmt.Errorf("%s %s: %w", b.Describe(), tool, perr)
	}
	return out, true, nil
}

// structured is a tool result's JSON object: structuredContent, else the
// first text content.
func structured(res *mcp.CallToolResult) (map[string]any, error) {
	if m, ok := res.StructuredContent.(map[string]any); ok {
		return m, nil
	}
	var text string
	for _, c := range res.Content {
		if t, ok := mcp.AsTextContent(c); ok {
			text = t.Text
			break
		}
	}
	if res.IsError {
		return nil, fmt.Errorf("the tool failed: %s", text)
	}
	var m map[string]any
	if err := jsonObject(text, &m); err != nil {
		return nil, fmt.Errorf("the answer is not a JSON object: %v", err)
	}
	return m, nil
}
