package gpio

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	pgpio "periph.io/x/conn/v3/gpio"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

// fakeLine stands in for a gpioioctl line. Its fields are only touched
// by the test goroutine between calls, except edges.
type fakeLine struct {
	name   string
	num    int
	L      pgpio.Level
	P      pgpio.Pull
	edge   pgpio.Edge
	edges  chan pgpio.Level
	closed bool
	outs   []pgpio.Level // every level driven, in order
}

func (f *fakeLine) Name() string      { return f.name }
func (f *fakeLine) Number() int       { return f.num }
func (f *fakeLine) Read() pgpio.Level { return f.L }
func (f *fakeLine) Halt() error       { return nil }
func (f *fakeLine) Close()            { f.closed = true }

func (f *fakeLine) In(p pgpio.Pull, e pgpio.Edge) error {
	f.P, f.edge = p, e
	return nil
}

func (f *fakeLine) Out(l pgpio.Level) error {
	f.outs = append(f.outs, l)
	f.L = l
	return nil
}

func (f *fakeLine) WaitForEdge(timeout time.Duration) bool {
	if f.edge == pgpio.NoEdge {
		return false
	}
	select {
	case l := <-f.edges:
		f.L = l
		return true
	case <-time.After(timeout):
		return false
	}
}

func fakeChip(label, path string, names ...string) hwChip {
	c := hwChip{name: strings.TrimPrefix(path, "/dev/"), label: label, path: path}
	for i, n := range names {
		c.lines = append(c.lines, &fakeLine{name: n, num: i, edges: make(chan pgpio.Level, 4)})
	}
	return c
}

func TestFindChip(t *testing.T) {
	chips := []hwChip{
		fakeChip("pinctrl-bcm2835", "/dev/gpiochip0", "GPIO0"),
		fakeChip("209c000.gpio", "/dev/gpiochip1", "a"),
		fakeChip("dup", "/dev/gpiochip2"),
		fakeChip("dup", "/dev/gpiochip3"),
	}
	c, err := findChip(chips, "209c000.gpio", "")
	if err != nil || c.path != "/dev/gpiochip1" {
		t.Fatalf("by label: %v, %v", c.path, err)
	}
	if c, err = findChip(chips, "", "/dev/gpiochip0"); err != nil || c.label != "pinctrl-bcm2835" {
		t.Fatalf("by path: %v, %v", c.label, err)
	}
	// The label wins; the path is the fallback when the label is not there.
	if c, err = findChip(chips, "gone", "/dev/gpiochip0"); err != nil || c.path != "/dev/gpiochip0" {
		t.Fatalf("fallback: %v, %v", c.path, err)
	}
	if _, err = findChip(chips, "209c000.gpio", "/dev/gpiochip0"); err == nil {
		t.Error("label and path naming different chips accepted")
	}
	if _, err = findChip(chips, "dup", ""); err == nil || !strings.Contains(err.Error(), "2 chips") {
		t.Errorf("ambiguous label: %v", err)
	}
	_, err = findChip(chips, "nope", "")
	if !errors.Is(err, drivers.ErrUnreachable) || !strings.Contains(err.Error(), `/dev/gpiochip1 label "209c000.gpio"`) {
		t.Errorf("missing chip error should list the chips: %v", err)
	}
	if _, err = findChip(chips, "", ""); err == nil {
		t.Error("no label and no path accepted")
	}
}

func TestLineLookup(t *testing.T) {
	c := newChip(fakeChip("lbl", "/dev/gpiochip0", "", "FAN", "VALVE"))
	in := drivers.LineConfig{Direction: manifest.DirInput}
	l, err := c.Line("VALVE", 0, in)
	if err != nil || l.(*Line).hw.Number() != 2 {
		t.Fatalf("by name: %v", err)
	}
	// An unnamed line by offset; "1" is not a name here, and the lookup never
	// goes through gpioreg (where "1" would be a sysfs pin).
	if l, err = c.Line("", 0, in); err != nil || l.(*Line).hw.Number() != 0 {
		t.Fatalf("by offset: %v", err)
	}
	if _, err = c.Line("1", 0, in); err == nil {
		t.Error(`line named "1" found`)
	}
	if _, err = c.Line("", 3, in); err == nil {
		t.Error("offset past the chip accepted")
	}
	if _, err = c.Line("FAN", 0, drivers.LineConfig{Direction: "sideways"}); err == nil {
		t.Error("bad direction accepted")
	}
	if _, err = c.Line("VALVE", 0, in); err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Errorf("second request of a line: %v", err)
	}
}

func TestOutputStartsSafeAndReportsLastWritten(t *testing.T) {
	hw := fakeChip("lbl", "/dev/gpiochip0", "RELAY")
	c := newChip(hw)
	pin := hw.lines[0].(*fakeLine)
	// Active-low relay: logical off (the safe level) is physically high.
	l, err := c.Line("RELAY", 0, drivers.LineConfig{Direction: manifest.DirOutput, ActiveLow: true, Initial: false})
	if err != nil {
		t.Fatal(err)
	}
	if len(pin.outs) != 1 || pin.outs[0] != pgpio.High {
		t.Fatalf("driven %v on request, want [High]", pin.outs)
	}
	ctx := context.Background()
	if err := l.Write(ctx, true); err != nil {
		t.Fatal(err)
	}
	if pin.L != pgpio.Low {
		t.Fatal("logical on of an active-low line should drive it low")
	}
	pin.L = pgpio.High // were Read to ask the hardware, it would see this
	if v, err := l.Read(ctx); err != nil || v != true {
		t.Fatalf("output read = %v, %v; want the last written level", v, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := pin.outs[len(pin.outs)-1]; got != pgpio.High || !pin.closed {
		t.Fatalf("on close: last driven %v, closed %v; want back at the safe level and released", got, pin.closed)
	}
}

func TestInput(t *testing.T) {
	hw := fakeChip("lbl", "/dev/gpiochip0", "DOOR")
	c := newChip(hw)
	pin := hw.lines[0].(*fakeLine)
	l, err := c.Line("DOOR", 0, drivers.LineConfig{Direction: manifest.DirInput, ActiveLow: true, Bias: "pull-up"})
	if err != nil {
		t.Fatal(err)
	}
	if pin.P != pgpio.PullUp {
		t.Fatalf("bias %v, want pull-up", pin.P)
	}
	ctx := context.Background()
	pin.L = pgpio.Low
	if v, _ := l.Read(ctx); v != true {
		t.Fatal("active-low input physically low should read true")
	}
	if err := l.Write(ctx, true); !errors.Is(err, drivers.ErrNotWritable) {
		t.Fatalf("write to an input = %v", err)
	}
	pin.edges <- pgpio.High
	line := l.(*Line)
	if v, err := line.WaitForEdge(ctx); err != nil || v != false {
		t.Fatalf("after a rising edge = %v, %v; want logical false", v, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 3*edgeSlice)
	defer cancel()
	if _, err := line.WaitForEdge(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no edge: %v", err)
	}
}

func TestBiasChecks(t *testing.T) {
	c := newChip(fakeChip("lbl", "/dev/gpiochip0", "A", "B", "C"))
	if _, err := c.Line("A", 0, drivers.LineConfig{Direction: manifest.DirInput, Bias: "disable"}); err == nil {
		t.Error(`bias "disable" accepted though periph cannot request it`)
	}
	if _, err := c.Line("B", 0, drivers.LineConfig{Direction: manifest.DirOutput, Bias: "pull-up"}); err == nil {
		t.Error("bias on an output accepted")
	}
	if _, err := c.Line("C", 0, drivers.LineConfig{Direction: manifest.DirInput, Bias: "weird"}); err == nil {
		t.Error("unknown bias accepted")
	}
}
