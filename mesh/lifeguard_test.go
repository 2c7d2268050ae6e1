package mesh

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Probing a dead peer leaves healthy probers healthy: the relays' nacks reach
// a prober at health score 0 before its probe's deadline, so Lifeguard does
// not blame the prober for the missing acks, and the dead peer is still
// declared dead within the bound. With ProbeTimeout = HB/2 every nack came
// just too late, whatever the load: each node that probed the dead peer rose
// to 2 or 3 in every attempt. In one process on a starved host all nodes
// stall together, and a stall that spans a nack's arrival and the deadline is
// taken (rightly) for the prober's own slowness, so an attempt may fail for
// the host; the test fails when three attempts in a row do.
func TestProbingTheDeadKeepsProbersHealthy(t *testing.T) {
	var report []string
	for attempt := 1; attempt <= 3; attempt++ {
		problem := probeTheDead(t)
		if problem == "" {
			return
		}
		report = append(report, fmt.Sprintf("attempt %d: %s", attempt, problem))
		t.Log(report[len(report)-1])
	}
	t.Errorf("in 3 attempts of 3:\n%s", strings.Join(report, "\n"))
}

// probeTheDead crashes one of five nodes and says what went wrong: a survivor
// whose health score rose above 1, or a death later than the bound.
func probeTheDead(t *testing.T) string {
	const hb = 1000 * time.Millisecond
	keys := testKey(t)
	nodes := []*Mesh{startNode(t, "node_0", "z", keys, hb)}
	defer nodes[0].Close()
	seed := nodes[0].Self().Addr
	for i := 1; i < 5; i++ {
		nodes = append(nodes, startNode(t, fmt.Sprintf("node_%d", i), "z", keys, hb, seed))
		defer nodes[i].Close()
	}
	survivors, victim := nodes[:4], nodes[4]
	healthy := func() bool {
		for _, m := range nodes {
			if m.Alive("") != 4 || m.ml.GetHealthScore() != 0 {
				return false
			}
		}
		return true
	}
	for start := time.Now(); !healthy(); time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > 20*time.Second {
			return "the 5 nodes were not all alive at health score 0 within 20 s (host too loaded)"
		}
	}
	tm := survivors[0].Timing()
	bound := tm.SuspectWithin + tm.DeadAfter
	killed := time.Now()
	victim.crash()
	highest := make([]int, len(survivors))
	var dead time.Duration
	waitFor(t, 10*tm.Interval, "every survivor lists node_4 dead", func() bool {
		all := true
		for i, m := range survivors {
			highest[i] = max(highest[i], m.ml.GetHealthScore())
			if p, _ := m.Peer("node_4"); p.State != Dead {
				all = false
			} else if dead == 0 {
				dead = time.Since(killed)
			}
		}
		return all
	})
	t.Logf("heartbeat %s: node_4 dead after %s (bound %s); highest health scores of the survivors meanwhile %v", hb, dead, bound, highest)
	var problems []string
	for _, s := range highest {
		if s > 1 {
			problems = append(problems, fmt.Sprintf("the survivors' health scores rose to %v while node_4 was probed and declared dead (want at most 1)", highest))
			break
		}
	}
	// The watch reads memberlist's table every quarter heartbeat; the rest
	// of the heartbeat allowed is scheduling on a loaded host.
	if dead > bound+tm.Interval {
		problems = append(problems, fmt.Sprintf("node_4 dead after %s, bound %s", dead, bound))
	}
	return strings.Join(problems, "; ")
}
