package policy

import (
	"testing"
	"time"

	"github.com/physmcp/physmcpd/internal/strictyaml"
)

func window(t *testing.T, days []string, start, end, tz string) *TimeWindow {
	t.Helper()
	w := &TimeWindow{Name: "w", Days: days, Start: start, End: end, Timezone: tz,
		At: strictyaml.Positions{Values: map[string]strictyaml.Pos{"start": {}, "end": {}, "timezone": {}}}}
	var diags strictyaml.Diags
	w.compile(strictyaml.NewDecoder("p.yml", &diags), "time_windows.w")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return w
}

func at(t *testing.T, tz, text string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(tz)
	if err != nil {
		t.Fatal(err)
	}
	v, err := time.ParseInLocation("2006-01-02 15:04", text, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestContainsAcrossMidnight(t *testing.T) {
	// Friday night 22:00 to 06:00 belongs to Friday: it covers early Saturday, not early Friday.
	w := window(t, []string{"fri"}, "22:00", "06:00", "Europe/Berlin")
	for _, tc := range []struct {
		when string
		want bool
	}{
		{"2026-06-05 21:59", false}, // Friday
		{"2026-06-05 22:00", true},
		{"2026-06-06 05:59", true}, // Saturday morning
		{"2026-06-06 06:00", false},
		{"2026-06-05 03:00", false}, // Friday morning belongs to Thursday night
		{"2026-06-06 23:00", false}, // Saturday night
	} {
		if got := w.Contains(at(t, "Europe/Berlin", tc.when)); got != tc.want {
			t.Errorf("%s: Contains = %v, want %v", tc.when, got, tc.want)
		}
	}
	// The same instant seen from another zone gives the same answer.
	if !w.Contains(at(t, "UTC", "2026-06-05 21:00")) { // 23:00 in Berlin (CEST)
		t.Error("zone conversion")
	}
}

func TestNextChange(t *testing.T) {
	w := window(t, nil, "08:00", "17:30", "Europe/Berlin")
	for _, tc := range []struct{ from, want string }{
		{"2026-06-05 07:00", "2026-06-05 08:00"},
		{"2026-06-05 08:00", "2026-06-05 17:30"},
		{"2026-06-05 18:00", "2026-06-06 08:00"},
	} {
		got := w.NextChange(at(t, "Europe/Berlin", tc.from))
		if want := at(t, "Europe/Berlin", tc.want); !got.Equal(want) {
			t.Errorf("from %s: NextChange = %s, want %s", tc.from, got, want)
		}
	}
	weekdays := window(t, []string{"mon", "tue", "wed", "thu", "fri"}, "08:00", "17:00", "UTC")
	if got, want := weekdays.NextChange(at(t, "UTC", "2026-06-05 18:00")), at(t, "UTC", "2026-06-08 08:00"); !got.Equal(want) {
		t.Errorf("over the weekend: %s, want %s", got, want)
	}
}

func TestNextChangeDST(t *testing.T) {
	// Berlin springs forward on 2026-03-29: 02:00 CET becomes 03:00 CEST, so 02:30 never happens.
	w := window(t, nil, "02:30", "04:00", "Europe/Berlin")
	from := at(t, "UTC", "2026-03-28 23:00") // 00:00 CET
	got := w.NextChange(from)
	// The window opens when the wall clock jumps past 02:30, at 03:00 CEST = 01:00 UTC.
	if want := at(t, "UTC", "2026-03-29 01:00"); !got.Equal(want) {
		t.Errorf("spring forward: NextChange = %s, want %s", got.UTC(), want)
	}
	if end := w.NextChange(got); !end.Equal(at(t, "UTC", "2026-03-29 02:00")) { // 04:00 CEST
		t.Errorf("spring forward: closes at %s", end.UTC())
	}
	// Autumn, 2026-10-25: 03:00 CEST becomes 02:00 CET; a 01:00-02:30 window lasts 2.5 h of real time.
	w = window(t, nil, "01:00", "02:30", "Europe/Berlin")
	open := w.NextChange(at(t, "UTC", "2026-10-24 22:00")) // 00:00 CEST
	closeAt := w.NextChange(open)
	if open.UTC() != at(t, "UTC", "2026-10-24 23:00") || closeAt.Sub(open) != 150*time.Minute {
		t.Errorf("fall back: open %s close %s", open.UTC(), closeAt.UTC())
	}
}

func TestEvaluateDenyWins(t *testing.T) {
	p := &Policy{TimeWindows: map[string]*TimeWindow{
		"day":   window(t, nil, "08:00", "18:00", "UTC"),
		"lunch": window(t, nil, "12:00", "13:00", "UTC"),
	}}
	r := &TimeWindowRule{AllowDuring: []string{"day"}, DenyDuring: []string{"lunch"}}
	for _, tc := range []struct {
		when, changes string
		allowed       bool
	}{
		{"2026-06-05 07:00", "2026-06-05 08:00", false},
		{"2026-06-05 09:00", "2026-06-05 12:00", true},
		{"2026-06-05 12:30", "2026-06-05 13:00", false},
		{"2026-06-05 13:00", "2026-06-05 18:00", true},
	} {
		allowed, reason, changes := r.Evaluate(p, at(t, "UTC", tc.when))
		if allowed != tc.allowed || !changes.Equal(at(t, "UTC", tc.changes)) || reason == "" {
			t.Errorf("%s: allowed %v (%s) until %s; want %v until %s", tc.when, allowed, reason, changes, tc.allowed, tc.changes)
		}
	}
	// A name the policy lacks denies rather than being skipped.
	if allowed, _, _ := (&TimeWindowRule{DenyDuring: []string{"ghost"}}).Evaluate(p, time.Now()); allowed {
		t.Error("an undefined window must deny")
	}
}

// A change of one window that does not change the decision is skipped.
func TestEvaluateSkipsIrrelevantChanges(t *testing.T) {
	p := &Policy{TimeWindows: map[string]*TimeWindow{
		"night": window(t, nil, "22:00", "06:00", "UTC"),
		"late":  window(t, nil, "23:00", "01:00", "UTC"),
	}}
	r := &TimeWindowRule{DenyDuring: []string{"night", "late"}}
	allowed, _, changes := r.Evaluate(p, at(t, "UTC", "2026-06-05 22:30"))
	if allowed || !changes.Equal(at(t, "UTC", "2026-06-06 06:00")) {
		t.Errorf("allowed %v until %s, want denied until 06:00", allowed, changes)
	}
}
