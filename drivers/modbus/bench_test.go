package modbus

import (
	"context"
	"sync"
	"testing"

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
