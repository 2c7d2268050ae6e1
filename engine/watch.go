package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// Watching readings (docs/engine.md, "Watching a reading"). A Watch reports
// the changes of one read capability's reading to one subscriber. The engine
// keeps one watcher per watched capability, alive only while it has
// subscribers: it polls the device at the capability's pace, and it also sees
// every reading the engine takes for other reasons (read_* calls, can_do,
// interlock checks, the read-back after a write), so a change made through
// this daemon is reported at once rather than at the next poll. Nothing polls
// a capability nobody watches.

const (
	// MinWatchInterval is the shortest poll period and minimum interval a
	// watch runs at: faster than that a bus serves watchers, not callers.
	MinWatchInterval = 100 * time.Millisecond
	// MaxWatches bounds the subscriptions of one engine, whoever holds them.
	MaxWatches = 1024
)

var (
	// ErrTooManyWatches: MaxWatches subscriptions are open.
	ErrTooManyWatches = errors.New("too many watches")
	// ErrWatchesStopped: StopWatches was called (physmcpd is stopping).
	ErrWatchesStopped = errors.New("watches stopped: physmcpd is stopping")
	// ErrNotPermitted: the caller may not read the capability; the error
	// names the permission and the reason.
	ErrNotPermitted = errors.New("not permitted")
)

// WatchOptions say which changes a Watch reports.
type WatchOptions struct {
	// Deadband: a numeric value that moved by no more than this from the last
	// reported one is not a change. 0 reports every change larger than the
	// capability's resolution. Non-numeric values report every change.
	Deadband float64
	// MinInterval: at most one update per interval. A change inside it is
	// held, and the latest reading is reported when the interval ends if it
	// still differs from the last one reported. Below MinWatchInterval it
	// counts as MinWatchInterval.
	MinInterval time.Duration
}

// Watch is one subscription to a reading's changes.
type Watch struct {
	// First is the reading when the watch began, as read_* would have
	// answered it; changes are reported relative to it.
	First promcp.ReadResponse
	// Updates receives each change as read_* would answer it at that moment
	// (a caller the policy no longer allows, say outside a time window, gets
	// quality error and the reason). It holds one reading: one the subscriber
	// has not taken when the next is reported is replaced by it, so a slow
	// subscriber sees the latest, never a backlog. Stop closes it.
	Updates <-chan promcp.ReadResponse

	updates chan promcp.ReadResponse
	w       *watcher
	caller  Caller
	opts    WatchOptions
	stopped bool // under w.mu
	ready   bool // under w.mu: First and last are set; the watcher passes it over until then

	// last is the reading last reported (First at the start), sent when it
	// was reported; pending is a change held by MinInterval. Owned by the
	// watcher's goroutine, under w.mu.
	last    promcp.ReadResponse
	sent    time.Time
	pending *promcp.ReadResponse
}

// Watch subscribes caller to the changes of read capability tool's reading.
// The caller must be allowed to read it now (ErrNotPermitted otherwise);
// ErrUnknownTool for a tool that is not a read_*. Stop ends the subscription;
// the capability stops being polled when its last subscription ends.
func (e *Engine) Watch(ctx context.Context, caller Caller, tool string, opts WatchOptions) (*Watch, error) {
	pt, err := e.lookup(tool, manifest.KindRead)
	if err != nil {
		return nil, err
	}
	if d := e.access(pt, caller); d.permission != promcp.Allowed {
		return nil, fmt.Errorf("%w: %s: %s", ErrNotPermitted, d.permission, d.reason)
	}
	if opts.Deadband < 0 || math.IsNaN(opts.Deadband) || math.IsInf(opts.Deadband, 0) {
		return nil, fmt.Errorf("deadband must be a finite number >= 0, got %v", opts.Deadband)
	}
	opts.MinInterval = max(opts.MinInterval, MinWatchInterval)
	ch := make(chan promcp.ReadResponse, 1)
	s := &Watch{Updates: ch, updates: ch, caller: caller, opts: opts}

	e.watches.mu.Lock()
	if e.watches.stopped {
		e.watches.mu.Unlock()
		return nil, ErrWatchesStopped
	}
	if e.watches.n >= MaxWatches {
		e.watches.mu.Unlock()
		return nil, fmt.Errorf("%w: %d subscriptions are open", ErrTooManyWatches, MaxWatches)
	}
	e.watches.n++
	w := pt.watch.Load()
	if w == nil {
		w = e.startWatcher(pt)
	}
	s.w = w
	// Subscribed before its first read, so that a Stop of the watcher's
	// other subscriptions meanwhile does not end the watcher; but without a
	// baseline yet, the watcher passes it over. The first read is taken
	// without any lock: a driver wedged in it would otherwise hold every
	// Stop and StopWatches beyond awaitPolls' bound.
	w.mu.Lock()
	w.subs[s] = struct{}{}
	w.mu.Unlock()
	e.watches.mu.Unlock()
	first := e.observe(ctx, pt)
	w.mu.Lock()
	s.First, s.last, s.ready = first, first, true
	w.mu.Unlock()
	// A change observed between the first read and now is judged against
	// the baseline by looking at the latest reading again.
	nudge(w.seen)
	w.rescheduled()
	return s, nil
}

// Stop ends the subscription and closes Updates; it may be called more than
// once. When it was the capability's last, Stop returns once the watcher's
// poll under way, if any, has ended: no poll of it reaches the bus after. A
// poll wedged past its timeout (awaitPolls) is not waited for.
func (s *Watch) Stop() {
	w := s.w
	e := w.e
	e.watches.mu.Lock()
	w.mu.Lock()
	if s.stopped {
		w.mu.Unlock()
		e.watches.mu.Unlock()
		return
	}
	s.stopped = true
	delete(w.subs, s)
	close(s.updates)
	last := len(w.subs) == 0
	w.mu.Unlock()
	e.watches.n--
	if !last {
		w.rescheduled()
		e.watches.mu.Unlock()
		return
	}
	w.pt.watch.Store(nil)
	w.cancel()
	// Waited for without the lock: a poll may take the capability's
	// timeout, and other watches need not wait for it.
	e.watches.mu.Unlock()
	e.awaitPolls(w.done, w.pt.c.Timeout(), w.pt.tool)
}

// pollWedgeMargin is how long past its capability's timeout Stop and
// StopWatches wait for a poll under way: a transaction still running then is
// wedged in its driver or the kernel (Health's WedgeMargin), and waiting for
// it would hold a session's end or, at shutdown, the safe state of every bus
// for good. A variable for tests.
var pollWedgeMargin = WedgeMargin

// awaitPolls waits until done is closed (the polls under way have ended),
// for at most timeout (the longest a poll's transaction takes) and
// pollWedgeMargin, and logs giving up on the polls of what.
func (e *Engine) awaitPolls(done <-chan struct{}, timeout time.Duration, what string) {
	t := time.NewTimer(timeout + pollWedgeMargin)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		e.log.Warn("a watch's poll has not returned: its driver or bus is wedged; stopping without waiting for it", "polling", what,
			"waited", timeout+pollWedgeMargin)
	}
}

// Watches is the number of subscriptions open.
func (e *Engine) Watches() int {
	e.watches.mu.Lock()
	defer e.watches.mu.Unlock()
	return e.watches.n
}

// watches is the engine's side of watching; its zero value is ready.
type watches struct {
	mu sync.Mutex // orders starting and stopping watchers; taken before any watcher's mu
	n  int        // subscriptions open
	// stopped: StopWatches was called; no watcher starts again.
	stopped bool
	// running counts the watchers' goroutines, stopped ones included
	// until their poll under way ends.
	running sync.WaitGroup
}

// watcher polls one point and tells its subscribers of changes.
type watcher struct {
	e      *Engine
	pt     *point
	ctx    context.Context // ends when the last subscription does
	cancel context.CancelFunc
	seen   chan struct{} // a reading of the point was taken: look at it
	poll   chan struct{} // the device may have changed: read it now
	resub  chan struct{} // subscriptions changed: recompute the schedule
	done   chan struct{} // closed when run returns

	mu   sync.Mutex
	subs map[*Watch]struct{}
}

// startWatcher starts pt's watcher; the caller holds e.watches.mu.
func (e *Engine) startWatcher(pt *point) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{e: e, pt: pt, ctx: ctx, cancel: cancel, subs: map[*Watch]struct{}{},
		seen: make(chan struct{}, 1), poll: make(chan struct{}, 1), resub: make(chan struct{}, 1), done: make(chan struct{})}
	pt.watch.Store(w)
	e.watches.running.Go(w.run)
	return w
}

func nudge(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (w *watcher) rescheduled() { nudge(w.resub) }

// measured tells the watchers at pt's register or line that pt was just read:
// pt's own watcher looks at the reading; the others (a read and a do point
// on one holding register) read their own point, which a write may have
// changed.
func (e *Engine) measured(pt *point) {
	if w := pt.watch.Load(); w != nil {
		nudge(w.seen)
	}
	for _, other := range e.catalog().byLocation[pt.location] {
		if other == pt {
			continue
		}
		if w := other.watch.Load(); w != nil {
			nudge(w.poll)
		}
	}
}

// run is the watcher's goroutine: it polls every period (reusing a reading
// taken in the last half period), looks at readings others took, and
// delivers changes held by a minimum interval when it ends.
func (w *watcher) run() {
	defer close(w.done)
	e, pt := w.e, w.pt
	nextPoll := time.Now().Add(w.period())
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		wake := time.Until(nextPoll)
		if due, ok := w.nextDue(); ok {
			wake = min(wake, due)
		}
		timer.Reset(max(wake, 0))
		select {
		case <-w.ctx.Done():
			return
		case <-w.resub:
			if soon := time.Now().Add(w.period()); soon.Before(nextPoll) {
				nextPoll = soon
			}
		case <-w.seen:
			if r, ok := e.peek(pt); ok {
				w.consider(r)
			}
		case <-w.poll:
			if w.ctx.Err() == nil {
				w.consider(e.observeWithin(w.ctx, pt, 0))
			}
		case <-timer.C:
			if w.ctx.Err() == nil && !time.Now().Before(nextPoll) {
				period := w.period()
				w.consider(e.observeWithin(w.ctx, pt, period/2))
				nextPoll = time.Now().Add(period)
			}
			w.flush()
		}
	}
}

// period is how often the point is polled: its cache TTL (a faster poll
// would only see cached readings), and no faster than the most eager
// subscriber's minimum interval needs.
func (w *watcher) period() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var p time.Duration
	for s := range w.subs {
		if p == 0 || s.opts.MinInterval < p {
			p = s.opts.MinInterval
		}
	}
	return max(p, w.pt.c.CacheTTL(), MinWatchInterval)
}

// nextDue is how long until the earliest held change may be delivered.
func (w *watcher) nextDue() (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.e.now()
	var due time.Duration
	found := false
	for s := range w.subs {
		if s.pending == nil {
			continue
		}
		d := s.sent.Add(s.opts.MinInterval).Sub(now)
		if !found || d < due {
			due, found = d, true
		}
	}
	return due, found
}

// consider offers reading r to every subscriber.
func (w *watcher) consider(r promcp.ReadResponse) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.e.now()
	for s := range w.subs {
		switch {
		case !s.ready:
		case !w.changed(s, r):
			s.pending = nil // back within the deadband of what was reported
		case now.Sub(s.sent) >= s.opts.MinInterval:
			w.deliver(s, r, now)
		default:
			s.pending = &r
		}
	}
}

// flush delivers the held changes whose minimum interval has ended.
func (w *watcher) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.e.now()
	for s := range w.subs {
		if s.pending != nil && now.Sub(s.sent) >= s.opts.MinInterval {
			w.deliver(s, *s.pending, now)
		}
	}
}

// deliver reports r to s; the caller holds w.mu.
func (w *watcher) deliver(s *Watch, r promcp.ReadResponse, now time.Time) {
	s.last, s.sent, s.pending = r, now, nil
	if d := w.e.access(w.pt, s.caller); d.permission != promcp.Allowed {
		r = w.e.refusedRead(w.pt, d)
	}
	select {
	case s.updates <- r:
	default:
		// The subscriber has not taken the previous one: replace it. Only
		// this goroutine sends, so there is room after the receive.
		select {
		case <-s.updates:
		default:
		}
		s.updates <- r
	}
}

// changed says whether r differs from what s was last told: another
// quality, a value appearing or going, or a value that moved beyond the
// deadband (or, with none, beyond the capability's resolution).
func (w *watcher) changed(s *Watch, r promcp.ReadResponse) bool {
	last := s.last
	if r.Quality != last.Quality || (r.Value == nil) != (last.Value == nil) {
		return true
	}
	if r.Value == nil {
		return false
	}
	a, aok := drivers.AsFloat(last.Value)
	b, bok := drivers.AsFloat(r.Value)
	if aok && bok && s.opts.Deadband > 0 {
		return math.Abs(a-b) > s.opts.Deadband
	}
	return !sameValue(w.pt, r.Value, last.Value)
}

// peek is what read_* would answer from the point's latest read attempt,
// without reading; false when there is none (or a write dropped it).
func (e *Engine) peek(pt *point) (promcp.ReadResponse, bool) {
	pt.mu.Lock()
	last, err := pt.last, pt.lastErr
	pt.mu.Unlock()
	if err == nil && last == nil {
		return promcp.ReadResponse{}, false
	}
	if err != nil {
		last = nil
		err = fmt.Errorf("%s: %w", pt.drv.Describe(), err)
	}
	return e.respond(pt, last, err), true
}

// StopWatches ends every watcher, on the way out (Close, and before the
// safe state written at shutdown): their subscriptions see nothing more, and
// Watch refuses new ones. It returns once their polls under way have ended,
// so that nothing a watcher started is on a bus after it, or were found
// wedged (awaitPolls).
func (e *Engine) StopWatches() {
	e.watches.mu.Lock()
	e.watches.stopped = true
	var longest time.Duration // the longest a poll takes
	for _, pt := range e.catalog().points {
		longest = max(longest, pt.c.Timeout())
		if w := pt.watch.Load(); w != nil {
			w.cancel()
		}
	}
	e.watches.mu.Unlock()
	done := make(chan struct{})
	go func() {
		e.watches.running.Wait() // with those a Stop ended and still polling
		close(done)
	}()
	e.awaitPolls(done, longest, "every watched capability")
}
