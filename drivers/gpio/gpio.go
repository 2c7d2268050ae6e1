// Package gpio is the real GPIO driver: the Linux GPIO character device
// through periph.io's gpioioctl (never the legacy sysfs interface, and never
// gpioreg.ByName with a number, which returns a sysfs pin).
//
// The periph-facing part is small (Open and periphChips); Chip and Line hold
// the logic: the chip found by label (fallback: path), the line by name or
// offset on that chip, active-low applied here, outputs driven to their safe
// level when requested and when the chip is closed, and outputs reporting the
// level last written, because periph's Read on an output silently re-requests
// the line as an input with a pull-up.
package gpio

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	pgpio "periph.io/x/conn/v3/gpio"
	"periph.io/x/host/v3"
	"periph.io/x/host/v3/gpioioctl"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

// hwLine is what the driver needs of a line: periph's *gpioioctl.GPIOLine,
// or a test double.
type hwLine interface {
	Name() string
	Number() int
	In(pull pgpio.Pull, edge pgpio.Edge) error
	Read() pgpio.Level
	Out(l pgpio.Level) error
	WaitForEdge(timeout time.Duration) bool
	Halt() error
	Close()
}

// hwChip describes one chip as found on the system.
type hwChip struct {
	name  string // gpiochipN
	label string // the driver's label, stable across kernels
	path  string // /dev/gpiochipN
	lines []hwLine
}

// Open finds the manifest's chip among the system's GPIO character devices (drivers.Opener).
func Open(_ context.Context, _ *manifest.Manifest, b *manifest.Bus) (drivers.Bus, error) {
	if b.GPIO == nil {
		return nil, fmt.Errorf("bus %q: no gpio settings", b.Name)
	}
	if _, err := host.Init(); err != nil {
		return nil, fmt.Errorf("bus %q: periph host init: %w", b.Name, err)
	}
	c, err := findChip(periphChips(), b.GPIO.Chip, b.GPIO.Path)
	if err != nil {
		return nil, fmt.Errorf("bus %q: %w", b.Name, err)
	}
	return newChip(c), nil
}

func periphChips() []hwChip {
	var out []hwChip
	for _, c := range gpioioctl.Chips {
		h := hwChip{name: c.Name(), label: c.Label(), path: c.Path()}
		for _, l := range c.Lines() {
			h.lines = append(h.lines, l)
		}
		out = append(out, h)
	}
	return out
}

// findChip picks the chip with the given label or, when no label is given or
// none matches, the chip at path. A label that several chips carry is an error.
func findChip(chips []hwChip, label, path string) (hwChip, error) {
	if label == "" && path == "" {
		return hwChip{}, errors.New("name the chip by label (chip) or by path")
	}
	if label != "" {
		var found []hwChip
		for _, c := range chips {
			if c.label == label {
				found = append(found, c)
			}
		}
		switch {
		case len(found) == 1:
			if path != "" && found[0].path != path {
				return hwChip{}, fmt.Errorf("chip label %q is %s, not path %s", label, found[0].path, path)
			}
			return found[0], nil
		case len(found) > 1:
			return hwChip{}, fmt.Errorf("%d chips carry label %q (%s): name the chip by path", len(found), label, chipList(found))
		}
	}
	if path != "" {
		for _, c := range chips {
			if c.path == path {
				return c, nil
			}
		}
	}
	return hwChip{}, fmt.Errorf("%w: no GPIO chip with label %q or path %q (found: %s)", drivers.ErrUnreachable, label, path, chipList(chips))
}

func chipList(chips []hwChip) string {
	if len(chips) == 0 {
		return "none"
	}
	var s []string
	for _, c := range chips {
		s = append(s, fmt.Sprintf("%s label %q", c.path, c.label))
	}
	return strings.Join(s, ", ")
}

// Chip is one GPIO chip. It implements drivers.GPIOChip.
type Chip struct {
	hw hwChip

	mu    sync.Mutex
	taken map[int]*Line
}

var _ drivers.GPIOChip = (*Chip)(nil)

func newChip(hw hwChip) *Chip { return &Chip{hw: hw, taken: map[int]*Line{}} }

// Describe names the chip ("gpio /dev/gpiochip0 (209c000.gpio)").
func (c *Chip) Describe() string { return fmt.Sprintf("gpio %s (%s)", c.hw.path, c.hw.label) }

// Line finds a line by name, or by offset when name is empty, and requests
// it. An output is driven to cfg.Initial (its safe level) at once.
func (c *Chip) Line(name string, offset int, cfg drivers.LineConfig) (drivers.GPIOLine, error) {
	hw, err := c.find(name, offset)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Describe(), err)
	}
	l := &Line{chip: c, hw: hw, cfg: cfg}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Checked before requesting: requesting reconfigures the line.
	if c.taken[hw.Number()] != nil {
		return nil, fmt.Errorf("%s: already in use", l.describe())
	}
	if err := l.request(); err != nil {
		return nil, fmt.Errorf("%s: %w", l.describe(), err)
	}
	c.taken[hw.Number()] = l
	return l, nil
}

func (c *Chip) find(name string, offset int) (hwLine, error) {
	if name != "" {
		for _, l := range c.hw.lines {
			if l.Name() == name {
				return l, nil
			}
		}
		return nil, fmt.Errorf("%w: no line named %q", drivers.ErrUnreachable, name)
	}
	if offset < 0 || offset >= len(c.hw.lines) {
		return nil, fmt.Errorf("line offset %d: the chip has lines 0..%d", offset, len(c.hw.lines)-1)
	}
	return c.hw.lines[offset], nil
}

// Close drives every output back to its safe level and releases the lines.
func (c *Chip) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for off, l := range c.taken {
		if l.cfg.Direction == manifest.DirOutput {
			if err := l.hw.Out(l.physical(l.cfg.Initial)); err != nil {
				errs = append(errs, fmt.Errorf("%s: returning to the safe level: %w", l.describe(), err))
			}
		}
		l.hw.Close()
		delete(c.taken, off)
	}
	return errors.Join(errs...)
}

// Line is one requested line. It implements drivers.GPIOLine.
type Line struct {
	chip *Chip
	hw   hwLine
	cfg  drivers.LineConfig

	mu    sync.Mutex
	last  bool // logical level last written to an output
	edges bool // input requested with edge detection
}

func (l *Line) describe() string {
	name := l.hw.Name()
	if name == "" {
		name = "-"
	}
	return fmt.Sprintf("%s line %d (%s)", l.chip.Describe(), l.hw.Number(), name)
}

func (l *Line) physical(level bool) pgpio.Level { return pgpio.Level(level != l.cfg.ActiveLow) }

func pull(bias string) (pgpio.Pull, error) {
	switch bias {
	case "", "as-is":
		return pgpio.PullNoChange, nil
	case "pull-up":
		return pgpio.PullUp, nil
	case "pull-down":
		return pgpio.PullDown, nil
	case "disable":
		// periph's gpioioctl sends no flag for Float, which leaves the bias as it was.
		return 0, errors.New(`bias "disable" cannot be requested through periph's gpioioctl (it would leave the bias as-is); use as-is, pull-up or pull-down`)
	}
	return 0, fmt.Errorf("bias %q: want as-is, pull-up, pull-down", bias)
}

func (l *Line) request() error {
	switch l.cfg.Direction {
	case manifest.DirInput:
		p, err := pull(l.cfg.Bias)
		if err != nil {
			return err
		}
		return l.hw.In(p, pgpio.NoEdge)
	case manifest.DirOutput:
		if l.cfg.Bias != "" && l.cfg.Bias != "as-is" {
			// periph requests outputs without bias flags.
			return fmt.Errorf("bias %q on an output cannot be requested through periph's gpioioctl", l.cfg.Bias)
		}
		// periph requests the line and makes it an output in two steps, and
		// the kernel drives it low in between: a safe level that is physically
		// high glitches low for microseconds (periph v3.8.5 has no initial value).
		l.last = l.cfg.Initial
		return l.hw.Out(l.physical(l.cfg.Initial))
	}
	return fmt.Errorf("direction %q: want input or output", l.cfg.Direction)
}

// Read returns an input's level, or the level last written to an output.
func (l *Line) Read(ctx context.Context) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cfg.Direction == manifest.DirOutput {
		return l.last, nil
	}
	return bool(l.hw.Read()) != l.cfg.ActiveLow, nil
}

// Write drives an output to the logical level, once. A failure is not in
// doubt (drivers.ErrInDoubt): the level is set by one local ioctl that the
// kernel refuses before touching the line, not a message that can be lost.
func (l *Line) Write(ctx context.Context, level bool) error {
	if l.cfg.Direction != manifest.DirOutput {
		return fmt.Errorf("%s: %w", l.describe(), drivers.ErrNotWritable)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.hw.Out(l.physical(level)); err != nil {
		return fmt.Errorf("%s: writing %v: %w", l.describe(), level, err)
	}
	l.last = level
	return nil
}

// edgeSlice bounds each wait, so a cancelled context is noticed even where
// Halt cannot interrupt the wait.
const edgeSlice = 100 * time.Millisecond

// WaitForEdge waits for the input to change and returns its new logical
// level. The first call turns on edge detection for the line (both edges).
func (l *Line) WaitForEdge(ctx context.Context) (bool, error) {
	if l.cfg.Direction != manifest.DirInput {
		return false, fmt.Errorf("%s: edge events need an input", l.describe())
	}
	l.mu.Lock()
	if !l.edges {
		p, _ := pull(l.cfg.Bias) // checked when the line was requested
		if err := l.hw.In(p, pgpio.BothEdges); err != nil {
			l.mu.Unlock()
			return false, fmt.Errorf("%s: enabling edge events: %w", l.describe(), err)
		}
		l.edges = true
	}
	l.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { _ = l.hw.Halt() })
	defer stop()
	for ctx.Err() == nil {
		if l.hw.WaitForEdge(edgeSlice) {
			return l.Read(ctx)
		}
	}
	return false, ctx.Err()
}
