package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// budget is the context one driver transaction runs under: the caller's,
// cut to the capability's timeout. context.WithTimeout would start a timer
// for every transaction (≈1.4 µs, several per cent of a loopback Modbus
// read), though the Modbus bus only asks Deadline and Err and enforces the
// deadline on the wire; budget starts one only for a driver that waits on
// Done (I2C, the simulator, a caller queued for a busy Modbus bus).
type budget struct {
	context.Context
	deadline time.Time
	ended    atomic.Bool // the transaction returned: the cancel of WithTimeout

	mu   sync.Mutex
	done <-chan struct{}
	stop context.CancelFunc
}

// newBudget is parent with deadline d, or with parent's own when it is earlier.
func newBudget(parent context.Context, d time.Time) *budget {
	if pd, ok := parent.Deadline(); ok && pd.Before(d) {
		d = pd
	}
	return &budget{Context: parent, deadline: d}
}

func (c *budget) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *budget) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		var inner context.Context
		inner, c.stop = context.WithDeadline(c.Context, c.deadline)
		if c.ended.Load() {
			c.stop()
		}
		c.done = inner.Done()
	}
	return c.done
}

func (c *budget) Err() error {
	if c.ended.Load() {
		return context.Canceled
	}
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// end releases the budget when the transaction is over.
func (c *budget) end() {
	c.ended.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop != nil {
		c.stop()
	}
}
