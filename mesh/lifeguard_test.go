package mesh

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Probing a dead peer leaves healthy probers healthy: the relays' nacks reach
// a prober at health score 0 before its probe's deadline, so Lifeguard does
// not blame the prober for the missing acks, and the dead peer is still
// declared dead within the bound. With ProbeTimeout = HB/2 every nack came
// just too late: each node that probed the dead peer rose to 2 or 3. The
// nodes talk over a memNet in a synctest bubble, so the protocol's timers
// run on the bubble's clock: a loaded host (which stalls all nodes of one
// process together) cannot make a prober look slow.
//
// The crash is repeated in crashes bubbles, since when the probers come back
// to the dead peer depends on their shuffled probe orders: against
// SuspectWithin (3 HB) instead of SuspectAtLatest about 1 crash in 13 was
// declared dead too late (5.8 s, bound 5 s).
func TestProbingTheDeadKeepsProbersHealthy(t *testing.T) {
	const crashes = 40
	deaths := map[time.Duration]int{}
	for range crashes {
		synctest.Test(t, func(t *testing.T) {
			dead, problem := probeTheDead(t)
			if problem != "" {
				t.Error(problem)
			}
			deaths[dead.Round(100*time.Millisecond)]++
		})
	}
	t.Logf("%d crashes: declared dead after (rounded to 100 ms): %v", crashes, deaths)
}

// probeTheDead crashes one of five nodes and says what went wrong: a survivor
// whose health score rose above 1, or a death later than the bound.
func probeTheDead(t *testing.T) (time.Duration, string) {
	const hb = 1000 * time.Millisecond
	keys, network := testKey(t), newMemNet()
	defer network.close(hb)
	nodes, _ := network.startNodes(t, keys, hb, 5)
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
			var seen []string
			for _, m := range nodes {
				seen = append(seen, fmt.Sprintf("%s: alive %d, health %d", m.cfg.NodeID, m.Alive(""), m.ml.GetHealthScore()))
			}
			return 0, "the 5 nodes were not all alive at health score 0 within 20 s: " + strings.Join(seen, "; ")
		}
	}
	tm := survivors[0].Timing()
	bound := tm.SuspectAtLatest + tm.DeadAfter
	killed := time.Now()
	victim.crash()
	highest := make([]int, len(survivors))
	var dead time.Duration
	waitFor(t, bound+tm.Interval, "every survivor lists node_4 dead", func() bool {
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
	var problems []string
	for _, s := range highest {
		if s > 1 {
			problems = append(problems, fmt.Sprintf("the survivors' health scores rose to %v while node_4 was probed and declared dead (want at most 1)", highest))
			break
		}
	}
	// The watch reads memberlist's table every quarter heartbeat.
	if dead > bound+tm.Interval/4 {
		problems = append(problems, fmt.Sprintf("node_4 dead after %s, bound %s", dead, bound))
	}
	return dead, strings.Join(problems, "; ")
}
