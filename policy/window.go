package policy

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // IANA zones on boards without /usr/share/zoneinfo

	"github.com/physmcp/physmcpd/internal/strictyaml"
)

var clock = regexp.MustCompile(`^([01][0-9]|2[0-3]):([0-5][0-9])$`)

var dayNames = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"} // indexed by time.Weekday

// Days in the order they are written (mon first).
var weekOrder = []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}

// compile checks a window and fills Location, StartMin, EndMin and DaySet.
func (w *TimeWindow) compile(d *strictyaml.Decoder, path string) {
	at := w.At
	if w.At.Has("days") && len(w.Days) == 0 {
		d.ErrorAt(at.Of("days"), path+".days", "is empty; leave days out to mean every day")
	}
	for i, day := range w.Days {
		idx := slices.Index(dayNames, strings.ToLower(day))
		switch {
		case idx < 0 || day != strings.ToLower(day):
			d.ErrorAt(at.Of("days"), fmt.Sprintf("%s.days[%d]", path, i), "unknown day %q; expected %s", day, strings.Join(weekOrder, ", "))
		case w.DaySet[idx]:
			d.ErrorAt(at.Of("days"), fmt.Sprintf("%s.days[%d]", path, i), "%s is listed twice", day)
		default:
			w.DaySet[idx] = true
		}
	}
	if len(w.Days) == 0 {
		w.DaySet = [7]bool{true, true, true, true, true, true, true}
	}
	start, okS := minutes(d, at, path, "start", w.Start)
	end, okE := minutes(d, at, path, "end", w.End)
	w.StartMin, w.EndMin = start, end
	if okS && okE && start == end {
		d.ErrorAt(at.Of("end"), path+".end", "start and end are both %s; a window needs a length (for all day use 00:00 to 23:59 or leave the rule out)", w.Start)
	}
	if w.Timezone != "" {
		loc, err := time.LoadLocation(w.Timezone)
		switch {
		case err != nil || w.Timezone == "Local":
			d.ErrorAt(at.Of("timezone"), path+".timezone", "unknown time zone %q; use an IANA name such as Europe/Berlin or UTC", w.Timezone)
		default:
			w.Location = loc
		}
	}
}

func minutes(d *strictyaml.Decoder, at Positions, path, key, value string) (int, bool) {
	if !at.Has(key) {
		return 0, false
	}
	m := clock.FindStringSubmatch(value)
	if m == nil {
		d.ErrorAt(at.Of(key), path+"."+key, "must be a 24-hour time HH:MM, got %q", value)
		return 0, false
	}
	h, _ := strconv.Atoi(m[1])
	mm, _ := strconv.Atoi(m[2])
	return h*60 + mm, true
}

// Contains reports whether t falls in the window. A window that runs over
// midnight belongs to the day it starts on.
func (w *TimeWindow) Contains(t time.Time) bool {
	if w == nil || w.Location == nil {
		return false
	}
	local := t.In(w.Location)
	m := local.Hour()*60 + local.Minute()
	day := local.Weekday()
	if w.StartMin < w.EndMin {
		return w.DaySet[day] && m >= w.StartMin && m < w.EndMin
	}
	yesterday := (day + 6) % 7
	return (w.DaySet[day] && m >= w.StartMin) || (w.DaySet[yesterday] && m < w.EndMin)
}

// NextChange returns the first instant after t at which Contains changes its
// answer, or the zero time if it never does within the next eight days.
// It walks the window's boundaries in local wall-clock time and the zone's
// offset changes, so daylight-saving shifts land where the clock on the wall says.
func (w *TimeWindow) NextChange(t time.Time) time.Time {
	if w == nil || w.Location == nil {
		return time.Time{}
	}
	local := t.In(w.Location)
	limit := t.Add(8 * 24 * time.Hour)
	var candidates []time.Time
	y, mo, dd := local.Date()
	for i := -1; i <= 8; i++ {
		for _, m := range []int{w.StartMin, w.EndMin} {
			candidates = append(candidates, time.Date(y, mo, dd+i, m/60, m%60, 0, 0, w.Location))
		}
	}
	for at := local; at.Before(limit); {
		_, end := at.ZoneBounds()
		if end.IsZero() {
			break
		}
		candidates = append(candidates, end)
		at = end
	}
	slices.SortFunc(candidates, func(a, b time.Time) int { return a.Compare(b) })
	now := w.Contains(t)
	for _, c := range candidates {
		if c.After(t) && !c.After(limit) && w.Contains(c) != now {
			return c
		}
	}
	return time.Time{}
}

// Evaluate decides the rule at t: allowed unless t is in a deny_during window
// (deny wins) or outside every allow_during window. changesAt is the next
// instant the decision flips (zero if not within a week); reason explains it.
// A window missing from the policy denies, so an unchecked policy fails safe.
func (r *TimeWindowRule) Evaluate(p *Policy, t time.Time) (allowed bool, reason string, changesAt time.Time) {
	if r == nil {
		return true, "", time.Time{}
	}
	allowed, reason = r.decide(p, t)
	at := t
	for range 64 { // a week holds at most a few boundaries per window
		next := time.Time{}
		for _, name := range slices.Concat(r.DenyDuring, r.AllowDuring) {
			if c := p.window(name).NextChange(at); !c.IsZero() && (next.IsZero() || c.Before(next)) {
				next = c
			}
		}
		if next.IsZero() {
			return allowed, reason, time.Time{}
		}
		if a, _ := r.decide(p, next); a != allowed {
			return allowed, reason, next
		}
		at = next
	}
	return allowed, reason, time.Time{}
}

func (r *TimeWindowRule) decide(p *Policy, t time.Time) (bool, string) {
	if r == nil {
		return true, ""
	}
	for _, name := range slices.Concat(r.DenyDuring, r.AllowDuring) {
		if p.window(name) == nil {
			return false, fmt.Sprintf("time window %q is not defined", name)
		}
	}
	for _, name := range r.DenyDuring {
		if p.window(name).Contains(t) {
			return false, fmt.Sprintf("inside the %q time window (deny_during)", name)
		}
	}
	if len(r.AllowDuring) == 0 {
		return true, "outside every deny_during window"
	}
	for _, name := range r.AllowDuring {
		if p.window(name).Contains(t) {
			return true, fmt.Sprintf("inside the %q time window (allow_during)", name)
		}
	}
	return false, fmt.Sprintf("outside the allowed time windows (%s)", strings.Join(r.AllowDuring, ", "))
}

func (p *Policy) window(name string) *TimeWindow {
	if p == nil {
		return nil
	}
	w := p.TimeWindows[name]
	if w == nil || w.Location == nil {
		return nil
	}
	return w
}
