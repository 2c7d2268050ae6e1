package engine

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/physmcp/physmcpd/drivers"
)

// LateAnswerTTL is how long an adopted source's answer to can_do that came
// after can_do's deadline stands in for the next answer that does not come
// in time (PhysMCP: late answers may be cached 5 s, never returned). A
// source that is slow, not gone (a loaded host, a long link), is then judged
// by its own answer from the second can_do on, not reported offline every
// time; a source that answered in time and then hangs is not vouched for by
// its earlier answer. The question itself runs no longer than that either.
const LateAnswerTTL = 5 * time.Second

// MaxQuestions is how many of can_do's questions may be out to one adopted
// source at once. A question to a source that hangs holds one of its
// MaxQueued transaction slots for LateAnswerTTL: a quarter of them leaves
// the rest to reads and do_*, which a burst of can_do about many values
// must not starve. No more are sent meanwhile: can_do judges by a late
// answer if one stands, else reports the source unreachable.
const MaxQuestions = MaxQueued / 4

// verdict is a source's latest answer to can_do about writing a value.
type verdict struct {
	value        any // nil: any value
	perm, reason string
	at           time.Time
	late         bool // after its can_do's deadline
}

func (pt *point) keepVerdict(v verdict) {
	pt.mu.Lock()
	pt.verdict = &v
	pt.mu.Unlock()
}

// lateVerdict is the source's latest answer about value, if it came late,
// within LateAnswerTTL before now.
func (pt *point) lateVerdict(value any, now time.Time) (verdict, bool) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	v := pt.verdict
	if v == nil || !v.late || now.Sub(v.at) > LateAnswerTTL || !sameValue(pt, v.value, value) {
		return verdict{}, false
	}
	return *v, true
}

// question is can_do's question to an adopted source about writing value
// to pt, while it is out.
type question struct {
	pt    *point
	value any
	done  chan struct{} // closed once ans is set
	ans   struct {
		perm, reason string
		reached      bool // the question left for the source
		err          error
	}
}

// questions are those out to one source (its device).
type questions struct {
	mu  sync.Mutex
	out []*question
}

// ask is the question about writing value to pt out to its source, sent
// now unless it is out already: each can_do asking the same meanwhile waits
// for the one answer, within its own deadline, instead of holding a
// transaction slot of its own. It is nil when MaxQuestions are out. The
// question runs detached for at most LateAnswerTTL; its answer is kept, as
// late when it comes after deadline (that of the can_do that sent it).
func (e *Engine) ask(ctx context.Context, pt *point, a drivers.Assessor, value any, deadline time.Time) *question {
	qs := &e.device(pt).questions
	qs.mu.Lock()
	defer qs.mu.Unlock()
	for _, q := range qs.out {
		if q.pt == pt && sameValue(pt, q.value, value) {
			return q
		}
	}
	if len(qs.out) >= MaxQuestions {
		return nil
	}
	q := &question{pt: pt, value: value, done: make(chan struct{})}
	qs.out = append(qs.out, q)
	go func() {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), LateAnswerTTL)
		defer cancel()
		q.ans.err = e.transact(actx, pt, opRead, func(ctx context.Context) (err error) {
			q.ans.reached = true
			q.ans.perm, q.ans.reason, err = a.Assess(ctx, value)
			return err
		})
		if q.ans.err == nil {
			pt.keepVerdict(verdict{value: value, perm: q.ans.perm, reason: q.ans.reason, at: e.now(), late: !time.Now().Before(deadline)})
		}
		qs.mu.Lock()
		qs.out = slices.DeleteFunc(qs.out, func(o *question) bool { return o == q })
		qs.mu.Unlock()
		close(q.done)
	}()
	return q
}
