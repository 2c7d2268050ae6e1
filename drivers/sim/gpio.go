package sim

import (
	"context"
	"fmt"
	"sort"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/codec"
	"github.com/physmcp/physmcpd/manifest"
)

// Chip simulates a GPIO chip whose lines are the ones capabilities are bound
// to: named lines by their names, the rest by offset. Lines bound by name get
// offsets after the highest explicit one. Levels are kept as on the wire
// (physical); lines apply active-low as the kernel would.
type Chip struct {
	*core
	byName   map[string]*simLine
	byOffset map[int]*simLine
}

type simLine struct {
	name      string
	offset    int
	output    bool
	activeLow bool
	physical  bool
}

func newChip(c *core, caps []*manifest.Capability) (*Chip, error) {
	ch := &Chip{core: c, byName: map[string]*simLine{}, byOffset: map[int]*simLine{}}
	next := 0
	for _, cp := range caps {
		if g := cp.Binding.GPIO; g != nil && g.Line == "" && g.Offset >= next {
			next = g.Offset + 1
		}
	}
	for _, cp := range caps {
		g := cp.Binding.GPIO
		if g == nil {
			return nil, fmt.Errorf("capability %s on a gpio bus has no gpio binding", cp.Name)
		}
		enc, err := codec.NewBool(cp)
		if err != nil {
			return nil, fmt.Errorf("capability %s: %w", cp.Name, err)
		}
		l := ch.byName[g.Line]
		if g.Line == "" {
			l = ch.byOffset[g.Offset]
		}
		if l == nil {
			l = &simLine{name: g.Line, offset: g.Offset}
			if g.Line != "" {
				l.offset = next
				next++
				ch.byName[g.Line] = l
			}
			ch.byOffset[l.offset] = l
		}
		l.output, l.activeLow = g.Direction == manifest.DirOutput, g.ActiveLow
		if err := c.add(cp, &gpioCell{l: l, enc: enc}); err != nil {
			return nil, err
		}
	}
	return ch, nil
}

type gpioCell struct {
	l   *simLine
	enc *codec.Bool
}

func (gc *gpioCell) region() region { return region{0, gc.l.offset, gc.l.offset + 1} }

func (gc *gpioCell) store(v any) error {
	level, err := gc.enc.Encode(v)
	if err != nil {
		return err
	}
	gc.l.physical = level != gc.l.activeLow
	return nil
}

func (gc *gpioCell) load() (any, string, error) {
	return gc.enc.Decode(gc.l.physical != gc.l.activeLow)
}

// Line requests a line by name (or by offset when name is empty). An output
// is driven to cfg.Initial at once.
func (ch *Chip) Line(name string, offset int, cfg drivers.LineConfig) (drivers.GPIOLine, error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	l := ch.byName[name]
	if name == "" {
		l = ch.byOffset[offset]
	}
	if l == nil {
		if name != "" {
			return nil, fmt.Errorf("%s: no line named %q", ch.desc, name)
		}
		return nil, fmt.Errorf("%s: no line at offset %d", ch.desc, offset)
	}
	l.output, l.activeLow = cfg.Direction == manifest.DirOutput, cfg.ActiveLow
	if l.output {
		l.physical = cfg.Initial != cfg.ActiveLow
		ch.rememberLine(l)
	}
	return &lineHandle{ch: ch, l: l}, nil
}

func (ch *Chip) rememberLine(l *simLine) {
	for _, p := range ch.points {
		if p.cell.(*gpioCell).l == l {
			p.remember()
		}
	}
}

type lineHandle struct {
	ch *Chip
	l  *simLine
}

func (h *lineHandle) Read(ctx context.Context) (bool, error) {
	if err := h.ch.transact(ctx); err != nil {
		return false, err
	}
	h.ch.mu.Lock()
	defer h.ch.mu.Unlock()
	if !h.l.output {
		if err := h.ch.refresh(region{0, h.l.offset, h.l.offset + 1}); err != nil {
			return false, err
		}
	}
	return h.l.physical != h.l.activeLow, nil
}

func (h *lineHandle) Write(ctx context.Context, level bool) error {
	if err := h.ch.transact(ctx); err != nil {
		return err
	}
	h.ch.mu.Lock()
	defer h.ch.mu.Unlock()
	if !h.l.output {
		return fmt.Errorf("%s: line %s is an input", h.ch.desc, h.l.label())
	}
	h.l.physical = level != h.l.activeLow
	return h.ch.written(region{0, h.l.offset, h.l.offset + 1})
}

func (l *simLine) label() string {
	if l.name != "" {
		return l.name
	}
	return fmt.Sprint(l.offset)
}

func (ch *Chip) find(name string) (*simLine, error) {
	if l := ch.byName[name]; l != nil {
		return l, nil
	}
	names := make([]string, 0, len(ch.byName))
	for n := range ch.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return nil, fmt.Errorf("%s: no line named %q (lines: %q)", ch.desc, name, names)
}

// SetInput drives an input line from outside to a physical level (before
// active-low). Points on the line stop following their simulation model.
func (ch *Chip) SetInput(name string, level bool) error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	l, err := ch.find(name)
	if err != nil {
		return err
	}
	if l.output {
		return fmt.Errorf("%s: line %s is an output", ch.desc, name)
	}
	l.physical = level
	for _, p := range ch.points {
		if p.cell.(*gpioCell).l == l {
			p.pinned = true
			p.remember()
		}
	}
	return nil
}

// Level is a line's physical level (before active-low); false for an unknown line.
func (ch *Chip) Level(name string) bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	l, err := ch.find(name)
	return err == nil && l.physical
}
