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
	}{{0, 0}, {2, 2 * time.Second}, {7, 7 * time.Second}, {9, 7 * time.Second}, {-1, 0}} {
		got := base.Slowed(c.score)
		if got.SuspectWithin != 3*time.Second+c.want || got.SuspectAtLatest != 8*time.Second+c.want ||
			got.DeadAfter != base.DeadAfter || got.Interval != base.Interval || got.ProbeTimeout != base.ProbeTimeout {
			t.Errorf("Slowed(%d) = %+v, want SuspectWithin and SuspectAtLatest %s later and the rest of %+v", c.score, got, c.want, base)
		}
	}
}

// A prober may come back to a peer 2(n−1)−1 heartbeats after it last probed
// it (its round of n−1 probes is reshuffled): the latest suspicion is the
// failure of that probe, never earlier than PhysMCP's 3 heartbeats.
func TestTimingSuspectAtLatest(t *testing.T) {
	for n, want := range map[int]time.Duration{1: 3, 2: 3, 3: 4, 5: 8, 20: 38} {
		if got := TimingFor(time.Second, n).SuspectAtLatest; got != want*time.Second {
			t.Errorf("%d nodes: SuspectAtLatest %s, want %s", n, got, want*time.Second)
		}
	}
}
