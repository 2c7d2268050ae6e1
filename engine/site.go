package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// site is one register or line, shared by every point that addresses it.
// Writes to it take turns (turn is held from a do_*'s limit check to its
// charge) and are numbered: a retried in-doubt key compares its write's
// number with the latest to tell "superseded by a later write" from "applied"
// or "not applied", which the device's value alone cannot (a later write
// overwrote the evidence).
type site struct {
	key string
	// turn holds a token while a writer has the turn: a channel, so that a
	// waiter can give up on a holder wedged in its driver.
	turn chan struct{}

	mu sync.Mutex
	// wedgedAt is when the turn's holder is past every transaction it may
	// run under the turn, and so is wedged (zero: the turn is free).
	wedgedAt time.Time
	seq      uint64           // number of the latest write charged
	latest   map[string]Write // each tool's latest write charged
	late     lateWrite
	// safe counts the times the safe state has driven a point here, so a
	// sequence can tell that it came while it ran.
	safe atomic.Uint64
}

// lateWrite is an in-doubt write whose frame the device may still apply
// until until (the end of its settle window: its bus's late_write_ms, or
// acknowledge_ms after the device acknowledged it).
type lateWrite struct {
	// key is the do_*'s idempotency_key, "" for a safe-state write
	// (driveSafe), which has none: by says why it was made, sent when.
	key   string
	by    string
	sent  time.Time
	value any
	until time.Time
	// why the window is open, as answers say it (whyLate, whyAck, whyRestored)
	why string
	// reply is the bus listening for the device's reply to the frame (nil:
	// it does not). Once the reply proved the frame applied, the frame can
	// no longer land later: the window is over.
	reply *drivers.LateReply
}

// Why a settle window is open, as the answers about it say.
const (
	whyLate     = "the bus's late_write_ms"
	whyAck      = "the device acknowledged it (Modbus exception 5) and acts on it later: the bus's acknowledge_ms"
	whyRestored = "the bus's late_write_ms, or acknowledge_ms after an acknowledge"
)

// what names the write, as the answers about its window say it.
func (l lateWrite) what() string {
	if l.key == "" {
		return fmt.Sprintf("the safe state's write of %v at %s (%s)", l.value, promcp.Time(l.sent), l.by)
	}
	return fmt.Sprintf("an earlier write of %v (idempotency_key %q)", l.value, l.key)
}

// noteLate records an in-doubt write's settle window; of two, the one that
// ends later stands.
func (s *site) noteLate(l lateWrite) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.until.After(s.late.until) {
		s.late = l
	}
}

// pendingLate returns the in-doubt write whose frame may still land now.
// It reads the clock only when there is one: can_do asks for every match.
func (s *site) pendingLate(now func() time.Time) (lateWrite, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.late, !s.late.until.IsZero() && !s.late.reply.Applied() && now().Before(s.late.until)
}

// lateOf is key's settle window here (ok false: none).
func (s *site) lateOf(key string) (l lateWrite, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.late.key != key || s.late.until.IsZero() {
		return lateWrite{}, false
	}
	return s.late, true
}

// endLate ends key's settle window once it has been waited out (on the
// clock the wait used, which the engine's may not be).
func (s *site) endLate(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.late.key == key {
		s.late = lateWrite{}
	}
}

// endWaited ends l once it has been waited out, unless another window
// replaced it meanwhile: two safe-state writes' windows share the key "".
func (s *site) endWaited(l lateWrite) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.late.key == l.key && s.late.until.Equal(l.until) {
		s.late = lateWrite{}
	}
}

// nextSeq is the number the next write will carry. Writes take turns, so
// nothing else numbers one before it is charged.
func (s *site) nextSeq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq + 1
}

// note records w, made through tool.
func (s *site) note(tool string, w Write) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq = max(s.seq, w.Seq)
	if s.latest == nil {
		s.latest = map[string]Write{}
	}
	if w.Seq > s.latest[tool].Seq {
		s.latest[tool] = w
	}
}

// after returns the latest write that came after the write numbered seq
// through a tool whose bits may overlap the writer's (overlaps).
func (s *site) after(seq uint64, overlaps func(tool string) bool) (w Write, tool string, later bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, l := range s.latest {
		if l.Seq > seq && l.Seq > w.Seq && overlaps(t) {
			w, tool, later = l, t, true
		}
	}
	return w, tool, later
}

// overlapping says, for a tool writing at pt's site, whether its writes may
// change pt's bits (a tool no longer served may have).
func (e *Engine) overlapping(pt *point) func(tool string) bool {
	points := e.catalog().points
	return func(tool string) bool {
		o, ok := points[tool]
		return !ok || fieldsOverlap(pt.c, o.c)
	}
}

// fieldsOverlap says whether writes of a and b, two capabilities writing
// at one site, may change the same bits: unless both are fields of one
// register, read the same way, whose bits are disjoint (an I2C mask or
// shift, a Modbus bit). A field's write merges into the register as read
// under its lock (drivers.lockRegister), so it keeps the other field's
// bits, and with them the evidence a retry of that field's in-doubt write
// settles by.
func fieldsOverlap(a, b *manifest.Capability) bool {
	fa, oka := fieldOf(a)
	fb, okb := fieldOf(b)
	return !oka || !okb || fa.register != fb.register || fa.bits&fb.bits != 0
}

// field is the bits of a register that a capability writes.
type field struct {
	register string // the register and how it is read
	bits     uint64
}

// fieldOf is c's field, when c writes part of a register (ok false: all of
// what it addresses).
func fieldOf(c *manifest.Capability) (f field, ok bool) {
	switch b := c.Binding; {
	case b.I2C != nil:
		i := b.I2C
		bits := i.Mask
		if bits == 0 { // from shift up: the codec's placement without a mask
			bits = (uint64(1)<<(8*i.Width) - 1) &^ (uint64(1)<<i.Shift - 1)
		}
		return field{fmt.Sprintf("%s/%d/%s", locationKey(c), i.Width, i.ByteOrder), bits}, true
	case b.Modbus != nil && b.Modbus.DataType == manifest.MBBit:
		return field{locationKey(c) + "/bit", uint64(1) << b.Modbus.Bit}, true
	}
	return field{}, false
}

// charged says whether the write numbered seq has been charged already.
func (s *site) charged(seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return seq <= s.seq
}

// takeWrites takes the write turn of pt's site and of every site its
// interlocks read, in one order (by key) so two writers never deadlock. Under
// it, an interlock's fresh read and the guarded write cannot interleave with
// a write to the interlock's source made through this daemon. It gives up
// when ctx ends or when a turn's holder is wedged, past every transaction it
// may run under the turn and WedgeMargin: a write stuck in its driver (a hung
// adapter, an ioctl that never returns) would otherwise hold every later
// write to its register for good, a do_*'s client (over MCP it has no
// deadline), the safe state and the shutdown with it.
func (e *Engine) takeWrites(ctx context.Context, pt *point) (unlock func(), err error) {
	sites := []*site{pt.site}
	turnTime := 3 * pt.c.Timeout() // the value before, the write, its read-back
	for _, il := range pt.c.Interlocks {
		if src, ok := e.catalog().points[il.Source.ToolName()]; ok {
			turnTime += src.c.Timeout() // its fresh read
			if !slices.Contains(sites, src.site) {
				sites = append(sites, src.site)
			}
		}
	}
	slices.SortFunc(sites, func(a, b *site) int { return strings.Compare(a.key, b.key) })
	unlock = func() {
		for _, s := range slices.Backward(sites) {
			s.mu.Lock()
			s.wedgedAt = time.Time{}
			s.mu.Unlock()
			<-s.turn
		}
	}
	for i, s := range sites {
		if err := s.take(ctx); err != nil {
			sites = sites[:i]
			unlock()
			return func() {}, err
		}
		s.mu.Lock()
		s.wedgedAt = time.Now().Add(turnTime + WedgeMargin)
		s.mu.Unlock()
	}
	return unlock, nil
}

// turnRecheck is how soon a waiter looks again at a turn whose holder has
// not yet set its bound.
const turnRecheck = 50 * time.Millisecond

// take waits for s's turn until ctx ends or the turn's holder is wedged. A
// free turn is taken even once ctx has ended.
func (s *site) take(ctx context.Context) error {
	select {
	case s.turn <- struct{}{}:
		return nil
	default:
	}
	var wedged *time.Timer
	defer func() {
		if wedged != nil {
			wedged.Stop()
		}
	}()
	for {
		s.mu.Lock()
		at := s.wedgedAt
		s.mu.Unlock()
		if !at.IsZero() && !time.Now().Before(at) {
			return fmt.Errorf("another write to %s has held its turn past its transactions' timeouts and %v: its driver or bus is wedged", s.key, WedgeMargin)
		}
		wait := time.Until(at)
		if at.IsZero() {
			// the turn changed hands and its new holder has not yet said
			// how long it may hold it
			wait = turnRecheck
		}
		if wedged == nil {
			wedged = time.NewTimer(wait)
		} else {
			wedged.Reset(wait)
		}
		select {
		case s.turn <- struct{}{}:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("waiting for another write to %s: %w", s.key, context.Cause(ctx))
		case <-wedged.C:
		}
	}
}
