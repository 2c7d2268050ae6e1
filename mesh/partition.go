package mesh

import "time"

// Partition states (PhysMCP v0.1 partition_state).
const (
	PartitionNone      = "none"
	PartitionSuspected = "suspected"
	PartitionHealing   = "healing"
)

// Partition detection parameters (PhysMCP v0.1): a suspected partition when
// reachable peers fall by more than partitionDrop within partitionWindow.
const (
	partitionWindow = 60 * time.Second
	partitionDrop   = 0.4
	// partitionForget ends a suspicion nobody came back from: a node cannot
	// tell a partition from the death of the peers it lost, and after this
	// long it takes the smaller mesh as the new normal.
	partitionForget = 10 * time.Minute
)

// Partition is what a node knows about a possible partition.
type Partition struct {
	State string `json:"state"`
	// Since is when State was entered (zero for none since start).
	Since time.Time `json:"since,omitzero"`
	// Before is how many peers were reachable before the drop (suspected and
	// healing only): the size this side compares itself with.
	Before int `json:"reachable_before,omitempty"`
	// Reachable is how many peers are alive now.
	Reachable int `json:"reachable"`
}

// Minority reports whether this node, with the peers it reaches, is at most
// half of the mesh it saw before the drop: the side that must not act on a
// quorum. False when no partition is suspected.
func (p Partition) Minority() bool {
	if p.State == PartitionNone {
		return false
	}
	return 2*(p.Reachable+1) <= p.Before+1
}

type sample struct {
	at time.Time
	n  int
}

// detector turns the count of reachable peers over time into a Partition.
// It is not safe for concurrent use (Mesh holds its lock).
type detector struct {
	samples []sample // within partitionWindow, oldest first
	p       Partition
	low     int       // fewest reachable while suspected
	settled time.Time // healing: since when Reachable has been enough
}

func newDetector() detector { return detector{p: Partition{State: PartitionNone}} }

// observe records n reachable peers at now and reports whether the state changed.
func (d *detector) observe(now time.Time, n int) bool {
	cut := now.Add(-partitionWindow)
	i := 0
	for i < len(d.samples) && d.samples[i].at.Before(cut) {
		i++
	}
	d.samples = append(d.samples[i:], sample{now, n})
	peak := 0
	for _, s := range d.samples {
		peak = max(peak, s.n)
	}
	prev := d.p.State
	d.p.Reachable = n
	enough := float64(n) >= (1-partitionDrop)*float64(d.p.Before)
	switch d.p.State {
	case PartitionNone:
		if float64(n) < (1-partitionDrop)*float64(peak) {
			d.p = Partition{State: PartitionSuspected, Since: now, Before: peak, Reachable: n}
			d.low = n
		}
	case PartitionSuspected:
		switch {
		case n > d.low:
			d.p.State, d.p.Since = PartitionHealing, now
			d.settled = time.Time{}
		case now.Sub(d.p.Since) >= partitionForget:
			d.p = Partition{State: PartitionNone, Since: now, Reachable: n}
		}
		d.low = min(d.low, n)
	case PartitionHealing:
		switch {
		case n <= d.low:
			d.p.State, d.p.Since = PartitionSuspected, now
			d.low = n
		case n >= d.p.Before:
			d.p = Partition{State: PartitionNone, Since: now, Reachable: n}
		case enough && d.settled.IsZero():
			d.settled = now
		case !enough:
			d.settled = time.Time{}
		case now.Sub(d.settled) >= partitionWindow:
			// Most came back and the rest stayed away for a whole window.
			d.p = Partition{State: PartitionNone, Since: now, Reachable: n}
		}
	}
	if d.p.State == PartitionNone {
		d.p.Before = 0
	}
	return d.p.State != prev
}
