package engine

import "time"

// LateAnswerTTL is how long an adopted source's answer to can_do that came
// after can_do's deadline stands in for the next answer that does not come
// in time (PhysMCP: late answers may be cached 5 s, never returned). A
// source that is slow, not gone (a loaded host, a long link), is then judged
// by its own answer from the second can_do on, not reported offline every
// time; a source that answered in time and then hangs is not vouched for by
// its earlier answer. The question itself runs no longer than that either.
const LateAnswerTTL = 5 * time.Second

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
