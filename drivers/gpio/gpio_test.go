package gpio

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

// fakeKernel models the v2 uAPI of one chip the way gpiolib-cdev answers it:
// line info, one-line requests (refused with EBUSY while a line is held),
// values through the request's fd, active-low applied by the kernel. Lines
// keep every physical level they were driven to.
type fakeKernel struct {
	lines    []*fakeLine
	requests []lineRequest // every request granted, in order
	byFd     map[int]*fakeLine
	closed   bool // the chip's fd
	// setErr fails SET_VALUES; after setApplied sets the level first, as a
	// chip driver whose bus transfer failed after the expander latched it.
	setErr     error
	setApplied bool
}

type fakeLine struct {
	name   string
	holder string // consumer label; "" when free
	flags  uint64
	high   bool   // physical level
	driven []bool // every physical level an output was driven to, in order
}

const chipFd = 3

func newFakeKernel(names ...string) *fakeKernel {
	k := &fakeKernel{byFd: map[int]*fakeLine{}}
	for _, n := range names {
		k.lines = append(k.lines, &fakeLine{name: n})
	}
	return k
}

func (k *fakeKernel) chip() *Chip {
	return newChip(hwChip{name: "gpiochip0", label: "lbl", path: "/dev/gpiochip0", lines: len(k.lines)}, k, chipFd)
}

func (k *fakeKernel) ioctl(fd int, req uint, arg unsafe.Pointer) error {
	switch req {
	case ioctlLineInfo:
		info := (*lineInfo)(arg)
		if fd != chipFd || int(info.Offset) >= len(k.lines) {
			return syscall.EINVAL
		}
		l := k.lines[info.Offset]
		copy(info.Name[:], l.name)
		copy(info.Consumer[:], l.holder)
		if l.holder != "" {
			info.Flags = flagUsed
		}
		return nil
	case ioctlGetLine:
		r := (*lineRequest)(arg)
		if fd != chipFd || r.NumLines != 1 || int(r.Offsets[0]) >= len(k.lines) {
			return syscall.EINVAL
		}
		l := k.lines[r.Offsets[0]]
		if l.holder != "" {
			return syscall.EBUSY
		}
		f := r.Config.Flags
		if f&flagOutput != 0 {
			var logical bool
			for _, a := range r.Config.Attrs[:r.Config.NumAttrs] {
				if a.Attr.ID == attrIDOutputValues && a.Mask&1 != 0 {
					logical = a.Attr.Value&1 != 0
				}
			}
			k.drive(l, logical != (f&flagActiveLow != 0))
		}
		l.holder, l.flags = cstring(r.Consumer[:]), f
		r.Fd = int32(100 + len(k.requests))
		k.byFd[int(r.Fd)] = l
		k.requests = append(k.requests, *r)
		return nil
	case ioctlGetValues, ioctlSetValues:
		l := k.byFd[fd]
		if l == nil {
			return syscall.EBADF
		}
		v := (*lineValues)(arg)
		activeLow := l.flags&flagActiveLow != 0
		if req == ioctlGetValues {
			v.Bits = bit(l.high != activeLow)
			return nil
		}
		if l.flags&flagOutput == 0 {
			return syscall.EPERM
		}
		if k.setErr != nil && !k.setApplied {
			return k.setErr
		}
		k.drive(l, (v.Bits&1 != 0) != activeLow)
		return k.setErr
	}
	return syscall.ENOTTY
}

func (k *fakeKernel) drive(l *fakeLine, high bool) {
	l.high = high
	l.driven = append(l.driven, high)
}

func (k *fakeKernel) close(fd int) error {
	if fd == chipFd {
		k.closed = true
		return nil
	}
	l := k.byFd[fd]
	if l == nil {
		return syscall.EBADF
	}
	l.holder = ""
	delete(k.byFd, fd)
	return nil
}

func TestUAPILayout(t *testing.T) {
	// Sizes and offsets from linux/gpio.h; the ioctl numbers as the kernel
	// headers expand them.
	for _, c := range []struct {
		what      string
		got, want uintptr
	}{
		{"sizeof(gpiochip_info)", unsafe.Sizeof(chipInfo{}), 68},
		{"sizeof(gpio_v2_line_values)", unsafe.Sizeof(lineValues{}), 16},
		{"sizeof(gpio_v2_line_attribute)", unsafe.Sizeof(lineAttribute{}), 16},
		{"gpio_v2_line_attribute.values", unsafe.Offsetof(lineAttribute{}.Value), 8},
		{"sizeof(gpio_v2_line_config_attribute)", unsafe.Sizeof(lineConfigAttribute{}), 24},
		{"gpio_v2_line_config_attribute.mask", unsafe.Offsetof(lineConfigAttribute{}.Mask), 16},
		{"sizeof(gpio_v2_line_config)", unsafe.Sizeof(lineConfig{}), 272},
		{"gpio_v2_line_config.num_attrs", unsafe.Offsetof(lineConfig{}.NumAttrs), 8},
		{"gpio_v2_line_config.attrs", unsafe.Offsetof(lineConfig{}.Attrs), 32},
		{"sizeof(gpio_v2_line_request)", unsafe.Sizeof(lineRequest{}), 592},
		{"gpio_v2_line_request.consumer", unsafe.Offsetof(lineRequest{}.Consumer), 256},
		{"gpio_v2_line_request.config", unsafe.Offsetof(lineRequest{}.Config), 288},
		{"gpio_v2_line_request.num_lines", unsafe.Offsetof(lineRequest{}.NumLines), 560},
		{"gpio_v2_line_request.event_buffer_size", unsafe.Offsetof(lineRequest{}.EventBufferSize), 564},
		{"gpio_v2_line_request.fd", unsafe.Offsetof(lineRequest{}.Fd), 588},
		{"sizeof(gpio_v2_line_info)", unsafe.Sizeof(lineInfo{}), 256},
		{"gpio_v2_line_info.offset", unsafe.Offsetof(lineInfo{}.Offset), 64},
		{"gpio_v2_line_info.flags", unsafe.Offsetof(lineInfo{}.Flags), 72},
		{"gpio_v2_line_info.attrs", unsafe.Offsetof(lineInfo{}.Attrs), 80},
		{"GPIO_GET_CHIPINFO_IOCTL", ioctlChipInfo, 0x8044B401},
		{"GPIO_V2_GET_LINEINFO_IOCTL", ioctlLineInfo, 0xC100B405},
		{"GPIO_V2_GET_LINE_IOCTL", ioctlGetLine, 0xC250B407},
		{"GPIO_V2_LINE_GET_VALUES_IOCTL", ioctlGetValues, 0xC010B40E},
		{"GPIO_V2_LINE_SET_VALUES_IOCTL", ioctlSetValues, 0xC010B40F},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.what, c.got, c.want)
		}
	}
}

func TestFindChip(t *testing.T) {
	chips := []hwChip{
		{label: "pinctrl-bcm2835", path: "/dev/gpiochip0"},
		{label: "209c000.gpio", path: "/dev/gpiochip1"},
		{label: "dup", path: "/dev/gpiochip2"},
		{label: "dup", path: "/dev/gpiochip3"},
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
	k := newFakeKernel("", "FAN", "VALVE", "1")
	c := k.chip()
	in := drivers.LineConfig{Direction: manifest.DirInput}
	l, err := c.Line("VALVE", 0, in)
	if err != nil || l.(*Line).offset != 2 || k.lines[2].holder != consumer {
		t.Fatalf("by name: %v", err)
	}
	// An unnamed line by offset; a name is matched as a name, never as a number.
	if l, err = c.Line("", 0, in); err != nil || l.(*Line).offset != 0 {
		t.Fatalf("by offset: %v", err)
	}
	if l, err = c.Line("1", 0, in); err != nil || l.(*Line).offset != 3 {
		t.Fatalf(`line named "1": %v`, err)
	}
	if _, err = c.Line("PUMP", 0, in); !errors.Is(err, drivers.ErrUnreachable) || !strings.Contains(err.Error(), `no line named "PUMP" on gpiochip0`) {
		t.Errorf("missing name: %v", err)
	}
	if _, err = c.Line("", 4, in); err == nil || !strings.Contains(err.Error(), "lines 0..3") {
		t.Errorf("offset past the chip: %v", err)
	}
	if _, err = c.Line("FAN", 0, drivers.LineConfig{Direction: "sideways"}); err == nil {
		t.Error("bad direction accepted")
	}
	if len(k.requests) != 3 {
		t.Errorf("%d requests reached the kernel, want 3 (refused lookups send none)", len(k.requests))
	}
}

func TestOutputStartsAtSafeLevel(t *testing.T) {
	// Active-high, safe level high: without the value in the request the
	// kernel would drive the line low first.
	hk := newFakeKernel("BRAKE")
	if _, err := hk.chip().Line("BRAKE", 0, drivers.LineConfig{Direction: manifest.DirOutput, Initial: true}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(hk.lines[0].driven) != "[true]" {
		t.Fatalf("safe level high: physical levels on request %v, want only [true]", hk.lines[0].driven)
	}

	k := newFakeKernel("RELAY")
	pin := k.lines[0]
	pin.high = true // pulled up before physmcpd starts: the relay is off
	c := k.chip()
	// Active-low relay: logical off (the safe level) is physically high.
	l, err := c.Line("RELAY", 0, drivers.LineConfig{Direction: manifest.DirOutput, ActiveLow: true, Initial: false})
	if err != nil {
		t.Fatal(err)
	}
	r := k.requests[0]
	if want := uint64(flagOutput | flagActiveLow); r.Config.Flags != want || cstring(r.Consumer[:]) != "physmcpd" {
		t.Errorf("request flags %#x consumer %q, want %#x physmcpd", r.Config.Flags, cstring(r.Consumer[:]), want)
	}
	a := r.Config.Attrs[0]
	if r.Config.NumAttrs != 1 || a.Attr.ID != attrIDOutputValues || a.Mask != 1 || a.Attr.Value != 0 {
		t.Errorf("request attributes %+v: want the output value (logical 0) for line 0", r.Config.Attrs[:r.Config.NumAttrs])
	}
	if fmt.Sprint(pin.driven) != "[true]" {
		t.Fatalf("physical levels on request %v, want only [true] (high, no glitch)", pin.driven)
	}
	ctx := context.Background()
	if err := l.Write(ctx, true); err != nil {
		t.Fatal(err)
	}
	if pin.high {
		t.Fatal("logical on of an active-low line should drive it low")
	}
	if v, err := l.Read(ctx); err != nil || v != true {
		t.Fatalf("output read = %v, %v; want the level it drives (true)", v, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(pin.driven) != "[true false true]" || pin.holder != "" || !k.closed {
		t.Fatalf("on close: levels %v, holder %q, chip closed %v; want back at the safe level (high), released", pin.driven, pin.holder, k.closed)
	}
	if err := l.Write(ctx, true); err == nil || !strings.Contains(err.Error(), "released") {
		t.Errorf("write after close: %v", err)
	}
	if _, err := c.Line("RELAY", 0, drivers.LineConfig{Direction: manifest.DirInput}); err == nil {
		t.Error("line requested from a closed chip")
	}
}

func TestInputBiasAndActiveLow(t *testing.T) {
	for bias, want := range map[string]uint64{
		"":          flagInput,
		"as-is":     flagInput,
		"pull-up":   flagInput | flagBiasPullUp,
		"pull-down": flagInput | flagBiasPullDown,
		"disable":   flagInput | flagBiasDisabled,
	} {
		k := newFakeKernel("DOOR")
		if _, err := k.chip().Line("DOOR", 0, drivers.LineConfig{Direction: manifest.DirInput, Bias: bias}); err != nil {
			t.Fatalf("bias %q: %v", bias, err)
		}
		if got := k.requests[0].Config; got.Flags != want || got.NumAttrs != 0 {
			t.Errorf("bias %q: flags %#x with %d attributes, want %#x and none", bias, got.Flags, got.NumAttrs, want)
		}
	}
	k := newFakeKernel("DOOR")
	l, err := k.chip().Line("DOOR", 0, drivers.LineConfig{Direction: manifest.DirInput, ActiveLow: true, Bias: "pull-up"})
	if err != nil {
		t.Fatal(err)
	}
	if f := k.requests[0].Config.Flags; f&flagActiveLow == 0 {
		t.Fatalf("flags %#x: active-low not requested", f)
	}
	ctx := context.Background()
	for _, high := range []bool{false, true} {
		k.lines[0].high = high
		if v, err := l.Read(ctx); err != nil || v == high {
			t.Errorf("active-low input physically high=%v read %v, %v", high, v, err)
		}
	}
	if err := l.Write(ctx, true); !errors.Is(err, drivers.ErrNotWritable) {
		t.Fatalf("write to an input = %v", err)
	}
}

func TestBiasRefused(t *testing.T) {
	k := newFakeKernel("B", "C")
	c := k.chip()
	if _, err := c.Line("B", 0, drivers.LineConfig{Direction: manifest.DirOutput, Bias: "pull-up"}); err == nil {
		t.Error("bias on an output accepted")
	}
	if _, err := c.Line("C", 0, drivers.LineConfig{Direction: manifest.DirInput, Bias: "weird"}); err == nil {
		t.Error("unknown bias accepted")
	}
	if len(k.requests) != 0 {
		t.Errorf("%d requests granted, want none", len(k.requests))
	}
}

func TestBusyLineNamesHolder(t *testing.T) {
	k := newFakeKernel("GPIO16", "PUMP", "FAN")
	k.lines[1].holder = "w1-gpio"
	c := k.chip()
	out := drivers.LineConfig{Direction: manifest.DirOutput}
	_, err := c.Line("PUMP", 0, out)
	if !errors.Is(err, drivers.ErrUnreachable) || !strings.Contains(err.Error(), `line 1 ("PUMP") on gpiochip0 is busy: held by "w1-gpio"`) {
		t.Errorf("busy line: %v", err)
	}
	if fmt.Sprint(k.lines[1].driven) != "[]" {
		t.Errorf("a busy line was driven: %v", k.lines[1].driven)
	}
	if _, err := c.Line("FAN", 0, out); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Line("", 2, out); err == nil || !strings.Contains(err.Error(), `line 2 ("FAN") on gpiochip0 is busy: held by "physmcpd"`) {
		t.Errorf("a line physmcpd already holds: %v", err)
	}
}

// A SET_VALUES that fails in the chip driver (an expander's bus transfer)
// may have set the line: in doubt, so the engine reads it back rather than
// report "not applied" for a relay that switched. One that gpiolib refuses
// before the driver runs set nothing. Either way the level is sent once.
func TestFailedSetIsInDoubtUnlessRefusedBeforeTheDriver(t *testing.T) {
	for _, c := range []struct {
		err     error
		applied bool
		inDoubt bool
	}{
		{syscall.EREMOTEIO, true, true},
		{syscall.EIO, false, true},
		{syscall.ETIMEDOUT, true, true},
		{syscall.ENODEV, false, false},
		{syscall.EPERM, false, false},
	} {
		k := newFakeKernel("RELAY")
		l, err := k.chip().Line("RELAY", 0, drivers.LineConfig{Direction: manifest.DirOutput})
		if err != nil {
			t.Fatal(err)
		}
		k.setErr, k.setApplied = c.err, c.applied
		err = l.Write(context.Background(), true)
		if !errors.Is(err, c.err) || errors.Is(err, drivers.ErrInDoubt) != c.inDoubt {
			t.Errorf("set failing with %v: err = %v, want it in doubt %v", c.err, err, c.inDoubt)
		}
		if want := map[bool]string{true: "[false true]", false: "[false]"}[c.applied]; fmt.Sprint(k.lines[0].driven) != want {
			t.Errorf("set failing with %v: levels driven %v, want %s (sent once)", c.err, k.lines[0].driven, want)
		}
	}
	// a call that ended before the ioctl did not set the line
	k := newFakeKernel("RELAY")
	l, err := k.chip().Line("RELAY", 0, drivers.LineConfig{Direction: manifest.DirOutput})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer stop()
	if err := l.Write(ctx, true); !errors.Is(err, drivers.ErrNotSent) || errors.Is(err, drivers.ErrInDoubt) || fmt.Sprint(k.lines[0].driven) != "[false]" {
		t.Errorf("write after its deadline = %v, levels %v; want not sent, nothing driven", err, k.lines[0].driven)
	}
}
