package drivers_test

import (
	"context"
	"testing"
)

// Zero-latency simulators: the cost of the point layer, codec and simulator per read.
func BenchmarkModbusPointRead(b *testing.B) {
	f := modbusFixture(b)
	p := f.bind("setpoint") // float32, two registers
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Read(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkModbusPointReadScaled(b *testing.B) {
	f := modbusFixture(b)
	p := f.bind("flow") // uint16 × 0.1
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Read(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkModbusPointWrite(b *testing.B) {
	f := modbusFixture(b)
	p := f.bind("setpoint")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Write(ctx, 21.5); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkI2CPointRead(b *testing.B) {
	f := i2cFixture(b)
	p := f.bind("temperature")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Read(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
