package drivers

import (
	"context"

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
