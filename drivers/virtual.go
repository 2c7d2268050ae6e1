package drivers

import (
	"context"
	"time"

	"github.com/physmcp/physmcpd/manifest"
)

// VirtualBus is a bus whose points are another server's tools (an mcp bus:
// capabilities adopted from another device). It binds them itself: there is
// no register or line to encode.
type VirtualBus interface {
	Bus
	BindVirtual(c *manifest.Capability, opt BindOptions) (Point, error)
}

// Declined is a request an adopted source answered without doing it: a
// read it answered with quality error, or a write its own checks refused
// (Permission is then its proMCP permission). The source is alive, so it
// is no transport failure; and nothing was written.
type Declined struct {
	// Permission is the source's permission for a refused write ("" for a read).
	Permission string
	Reason     string
}

func (d *Declined) Error() string {
	if d.Permission == "" {
		return "the source answered without a value: " + d.Reason
	}
	return "the source refused (" + d.Permission + "): " + d.Reason
}

// Outage is a point that knows when its source stopped giving values: an
// adopted source whose line closed (reported by the transport the moment it
// happens), whose connection broke or did not answer, or that answered
// quality error. The engine then no longer serves a cached value as fresh,
// and serves the last good one as stale for at most the capability's cache
// TTL from that moment (docs/engine.md, read_*). A local device cannot tell
// a lost device from a slow one and has no such report.
type Outage interface {
	// OutFor is how long the source has given no value; out is false
	// while it gives them. It is measured on the monotonic clock, so a
	// wall clock set at boot does not stretch or cut it short.
	OutFor() (d time.Duration, out bool)
}

type keyCtx struct{}

// WithIdempotencyKey carries a do_* call's idempotency key to the point that
// writes it, so that a point whose device is itself idempotent by key (an
// adopted do_*) passes the caller's key on instead of inventing one.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// IdempotencyKey is the key WithIdempotencyKey put in ctx, or "".
func IdempotencyKey(ctx context.Context) string {
	k, _ := ctx.Value(keyCtx{}).(string)
	return k
}

// Assessor is a point whose device judges an action itself (an adopted do_:
// the source's can_do), so that a dry run includes the device's own
// policy, cooldowns and limits besides this one's. permission is a proMCP
// permission, or "" when the device has no opinion of the action.
type Assessor interface {
	Assess(ctx context.Context, value Value) (permission, reason string, err error)
}

// Liveness is a point whose device can be known to be away without asking
// it (an adopted device the mesh lists as dead): Offline says why, and nil
// while the device may answer. can_do then blocks the point as unreachable
// at once, even while a reading from before is still cached.
type Liveness interface {
	Offline() error
}
