package engine

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/physmcp/physmcpd/drivers"
)

// site is one register or line, shared by every point that addresses it.
// Writes to it take turns (turn is held from a do_*'s limit check to its
// charge) and are numbered: a retried in-doubt key compares its write's
// number with the latest to tell "superseded by a later write" from "applied"
// or "not applied", which the device's value alone cannot (a later write
// overwrote the evidence).
type site struct {
	key  string
	turn sync.Mutex

	mu       sync.Mutex
	seq      uint64 // number of the latest write charged
	last     Write  // the latest write charged
	lastTool string
	late     lateWrite
}

// lateWrite is an in-doubt write whose frame the device may still apply
// until until (the end of its settle window: its bus's late_write_ms, or
// acknowledge_ms after the device acknowledged it).
type lateWrite struct {
	key   string
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

// nextSeq is the number the next write will carry. Writes take turns, so
// nothing else numbers one before it is charged.
func (s *site) nextSeq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq + 1
}

// note records w (made through tool) when it is the latest write so far.
func (s *site) note(tool string, w Write) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.Seq > s.seq {
		s.seq, s.last, s.lastTool = w.Seq, w, tool
	}
}

// after returns the latest write when it came after the write numbered seq.
func (s *site) after(seq uint64) (w Write, tool string, later bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.lastTool, s.seq > seq
}

// charged says whether the write numbered seq has been charged already.
func (s *site) charged(seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return seq <= s.seq
}

// lockWrites takes the write turn of pt's site and of every site its
// interlocks read, in one order (by key) so two writers never deadlock. Under
// it, an interlock's fresh read and the guarded write cannot interleave with
// a write to the interlock's source made through this daemon.
func (e *Engine) lockWrites(pt *point) (unlock func()) {
	sites := []*site{pt.site}
	for _, il := range pt.c.Interlocks {
		if src, ok := e.catalog().points[il.Source.ToolName()]; ok && !slices.Contains(sites, src.site) {
			sites = append(sites, src.site)
		}
	}
	slices.SortFunc(sites, func(a, b *site) int { return strings.Compare(a.key, b.key) })
	for _, s := range sites {
		s.turn.Lock()
	}
	return func() {
		for _, s := range slices.Backward(sites) {
			s.turn.Unlock()
		}
	}
}
