package modbus

import (
	"fmt"
	"time"

	"github.com/physmcp/physmcpd/drivers"
)

const (
	backoffBase = 100 * time.Millisecond
	backoffMax  = 3 * time.Second
)

// backoff spaces out attempts to (re)open a connection or port after failures:
// 100 ms, doubling, at most 3 s. A request whose deadline comes before the next
// allowed attempt fails at once instead of hammering a dead device.
type backoff struct {
	failures int
	next     time.Time
	lastErr  error
}

func (b *backoff) delay() time.Duration {
	d := backoffBase
	for i := 1; i < b.failures && d < backoffMax; i++ {
		d *= 2
	}
	return min(d, backoffMax)
}

func (b *backoff) failed(now time.Time, err error) {
	b.failures++
	b.lastErr = err
	b.next = now.Add(b.delay())
}

func (b *backoff) succeeded() { *b = backoff{} }

// wait returns when the next attempt is allowed. It fails with
// drivers.ErrUnreachable when that is after deadline or when stop closes.
func (b *backoff) wait(now, deadline time.Time, stop <-chan struct{}) error {
	if b.failures == 0 || !now.Before(b.next) {
		return nil
	}
	if b.next.After(deadline) {
		return fmt.Errorf("%w: %d failed attempts, next in %v: %w", drivers.ErrUnreachable,
			b.failures, b.next.Sub(now).Round(time.Millisecond), b.lastErr)
	}
	t := time.NewTimer(b.next.Sub(now))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-stop:
		return fmt.Errorf("%w: %w", drivers.ErrUnreachable, ErrClosed)
	}
}
