package mesh

import (
	"testing"
	"time"
)

func TestPartitionDetector(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	steps := []struct {
		at        float64
		reachable int
		want      string
		minority  bool
	}{
		{0, 4, PartitionNone, false},
		{5, 3, PartitionNone, false},      // 25 %: one peer died
		{6, 4, PartitionNone, false},      // it came back
		{10, 1, PartitionSuspected, true}, // 75 % lost: 3 + 2 split, this side has 2 of 5
		{20, 1, PartitionSuspected, true},
		{30, 2, PartitionHealing, false}, // one came back
		{31, 1, PartitionSuspected, true},
		{40, 4, PartitionHealing, false},
		{40.5, 4, PartitionNone, false}, // all back
		{200, 4, PartitionNone, false},
		{201, 2, PartitionSuspected, false},  // majority side of a 3 + 2 split
		{201 + 600, 2, PartitionNone, false}, // nobody back for 10 minutes: the new normal
		{1000, 2, PartitionNone, false},
	}
	d := newDetector()
	for _, s := range steps {
		d.observe(at(s.at), s.reachable)
		if d.p.State != s.want || d.p.Minority() != s.minority {
			t.Fatalf("t=%gs reachable %d: %s (minority %v), want %s (minority %v)", s.at, s.reachable, d.p.State, d.p.Minority(), s.want, s.minority)
		}
	}
}

func TestPartitionHealingSettles(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := newDetector()
	d.observe(t0, 9)
	d.observe(t0.Add(time.Second), 3) // suspected, 9 before
	d.observe(t0.Add(2*time.Second), 6)
	if d.p.State != PartitionHealing {
		t.Fatalf("%s, want healing", d.p.State)
	}
	d.observe(t0.Add(3*time.Second), 6) // 6 >= 60 % of 9: settling
	d.observe(t0.Add(62*time.Second), 6)
	if d.p.State != PartitionHealing {
		t.Fatalf("%s before a whole window settled, want healing", d.p.State)
	}
	d.observe(t0.Add(64*time.Second), 6)
	if d.p.State != PartitionNone {
		t.Fatalf("%s after a settled window, want none", d.p.State)
	}
}
