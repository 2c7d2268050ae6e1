package modbus

import (
	"context"
	"sync"
	"testing"
	"time"

	gb "github.com/goburrow/modbus"

	"github.com/physmcp/physmcpd/internal/benchround"
	"github.com/physmcp/physmcpd/internal/modbusfault"
	"github.com/physmcp/physmcpd/manifest"
)

func benchRead8(b *testing.B, bus *Bus) {
	ctx := context.Background()
	for b.Loop() {
		if _, err := bus.ReadRegisters(ctx, 1, manifest.TableHolding, 0, 8); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTCPRead8 is one FC3 read of 8 registers from the pymodbus peer over loopback TCP.
func BenchmarkTCPRead8(b *testing.B) {
	peer := startTCPPeer(b)
	benchRead8(b, tcpBus(b, peer.addr(), 1000, 0, manifest.DefaultMaxGap))
}

// BenchmarkRTURead8 is the same read over RTU through a socat pseudo-terminal
// pair (ptys have no baud rate: this is software latency, not wire time).
func BenchmarkRTURead8(b *testing.B) {
	peer := startRTUPeer(b)
	benchRead8(b, peer.bus(b, 1000, 0, 0))
}

// BenchmarkTCPParallel8 is 8 callers each reading one of 8 adjacent
// registers at the same time, with and without coalescing; one op is all 8 reads.
func BenchmarkTCPParallel8(b *testing.B) {
	peer := startTCPPeer(b)
	for _, c := range []struct {
		name   string
		maxGap int
	}{{"coalesced", manifest.DefaultMaxGap}, {"separate", -1}} {
		b.Run(c.name, func(b *testing.B) {
			bus := tcpBus(b, peer.addr(), 1000, 0, c.maxGap)
			ctx := context.Background()
			before := bus.Transactions()
			for b.Loop() {
				var wg sync.WaitGroup
				for i := range uint16(8) {
					wg.Go(func() {
						if _, err := bus.ReadRegisters(ctx, 1, manifest.TableHolding, i, 1); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(bus.Transactions()-before)/float64(b.N), "transactions/op")
		})
	}
}

// BenchmarkBusVsGoburrow puts physmcpd's bus beside a bare goburrow client,
// each reading the same 8 holding registers over its own connection to the
// same loopback server (internal/modbusfault). One op is one round of 200
// reads by each, interleaved; bus/goburrow is the median over the rounds of
// the per-round ratio of their times per read (issue 12: goal ≤ 1.03).
// Run it with rounds to spare: go test -run - -bench BusVsGoburrow -benchtime 60x.
func BenchmarkBusVsGoburrow(b *testing.B) {
	srv := modbusfault.StartTCP(b)
	bus := tcpBus(b, srv.Addr(), 1000, 0, manifest.DefaultMaxGap)
	h := gb.NewTCPClientHandler(srv.Addr())
	h.Timeout, h.SlaveId = time.Second, 1
	b.Cleanup(func() { h.Close() })
	bare := gb.NewClient(h)
	ctx := context.Background()
	readBare := func(n int) {
		for range n {
			if _, err := bare.ReadHoldingRegisters(0, 8); err != nil {
				b.Fatal(err)
			}
		}
	}
	readBus := func(n int) {
		for range n {
			if _, err := bus.ReadRegisters(ctx, 1, manifest.TableHolding, 0, 8); err != nil {
				b.Fatal(err)
			}
		}
	}
	readBare(100) // connect both and warm up
	readBus(100)
	ns := benchround.Rounds(b, 200, readBare, readBus)
	ratios := benchround.Ratios(ns, func(t []float64) float64 { return t[1] / t[0] })
	b.ReportMetric(benchround.Median(ratios), "bus/goburrow")
	b.ReportMetric(benchround.Median(benchround.Column(ns, 0)), "goburrow-ns/read")
	b.ReportMetric(benchround.Median(benchround.Column(ns, 1)), "bus-ns/read")
	b.ReportMetric(0, "ns/op")
}
