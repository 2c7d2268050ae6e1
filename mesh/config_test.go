package mesh

import (
	"testing"
	"time"
)

// A health score of s delays the suspicion by s heartbeats, never beyond
// memberlist's maximum, and leaves the suspicion timeout alone.
func TestTimingSlowed(t *testing.T) {
	base := TimingFor(time.Second, 5)
	for _, c := range []struct {
		score int
		want  time.Duration
	}{{0, 3 * time.Second}, {2, 5 * time.Second}, {7, 10 * time.Second}, {9, 10 * time.Second}, {-1, 3 * time.Second}} {
		got := base.Slowed(c.score)
		if got.SuspectWithin != c.want || got.DeadAfter != base.DeadAfter || got.Interval != base.Interval || got.ProbeTimeout != base.ProbeTimeout {
			t.Errorf("Slowed(%d) = %+v, want SuspectWithin %s and the rest of %+v", c.score, got, c.want, base)
		}
	}
}
