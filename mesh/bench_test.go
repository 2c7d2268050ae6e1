package mesh

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkConvergence starts n nodes on loopback (heartbeat 1 s, the
// default), each given the first as its seed peer, and reports how long
// until every node lists the n-1 others alive (goal: under 5 s for 20).
func BenchmarkConvergence(b *testing.B) {
	for _, n := range []int{5, 20} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			var total time.Duration
			for range b.N {
				total += converge(b, n)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/converge")
		})
	}
}

func converge(b *testing.B, n int) time.Duration {
	keys := testKey(b)
	start := time.Now()
	nodes := make([]*Mesh, 0, n)
	defer func() {
		b.StopTimer()
		var wg sync.WaitGroup
		for _, m := range nodes {
			wg.Go(func() { m.Close() })
		}
		wg.Wait()
		b.StartTimer()
	}()
	for i := range n {
		var seeds []string
		if i > 0 {
			seeds = []string{nodes[0].Self().Addr}
		}
		m, err := Start(Config{DeviceID: fmt.Sprintf("node_%02d", i), BindAddr: "127.0.0.1", SeedPeers: seeds,
			MaxPeers: 32, HeartbeatInterval: time.Second, Keys: keys, Logger: testLogger(b)})
		if err != nil {
			b.Fatal(err)
		}
		nodes = append(nodes, m)
	}
	for deadline := start.Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		done := true
		for _, m := range nodes {
			done = done && m.Alive("") == n-1
		}
		if done {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d nodes did not converge within 30 s", n)
		}
	}
}
