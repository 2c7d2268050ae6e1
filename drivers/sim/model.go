package sim

import (
	"fmt"
	"math"
	"math/rand"
	"sync/atomic"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

// cell is the device memory one capability is bound to, seen through its codec.
// Callers hold the bus lock.
type cell interface {
	store(v any) error
	load() (v any, flag string, err error)
	region() region
}

// simPoint is one capability on a simulated bus.
type simPoint struct {
	c     *manifest.Capability
	cell  cell
	model *model // nil: the memory holds whatever was last stored
	// pinned: SetValue fixed the value; the model no longer runs.
	pinned bool
	world  *world
	// last is the value the memory held after the latest write, read by
	// followers on any bus without taking this bus's lock.
	last atomic.Pointer[box]
}

type box struct{ v any }

func (p *simPoint) remember() {
	v, _, err := p.cell.load()
	if err != nil {
		v = nil
	}
	p.last.Store(&box{v})
}

func newSimPoint(m *manifest.Manifest, c *manifest.Capability, cl cell, now time.Time, seed bool) (*simPoint, error) {
	p := &simPoint{c: c, cell: cl}
	initial := initialValue(c)
	s := c.Simulation
	if s != nil {
		dynamic := s.Noise != 0 || s.Wave != nil || s.Implausible != 0 || s.Follows != ""
		if dynamic && c.Kind == manifest.KindDo {
			return nil, fmt.Errorf("simulation noise, waveform, implausible_rate and follows apply to read capabilities; a do capability holds what was last written")
		}
		if (s.Noise != 0 || s.Wave != nil || s.Implausible != 0) && !c.IsNumeric() {
			return nil, fmt.Errorf("simulation noise, waveform and implausible_rate need a float or int capability, not %s", c.DataType)
		}
		if dynamic {
			md, err := newModel(m, c, initial, now)
			if err != nil {
				return nil, err
			}
			if s.Implausible > 0 {
				if md.implausible, err = implausibleValue(c, cl); err != nil {
					return nil, err
				}
			}
			p.model = md
		}
	}
	if seed {
		if err := cl.store(initial); err != nil {
			return nil, fmt.Errorf("initial value %v: %w", initial, err)
		}
	}
	p.remember()
	return p, nil
}

// hasOwnInitial reports whether the manifest gives the point a starting value.
func hasOwnInitial(c *manifest.Capability) bool {
	return c.Simulation != nil && c.Simulation.Initial != nil || c.Kind == manifest.KindDo && c.SafeValue != nil
}

// initialValue is simulation.initial, else (do points) safe_value, else a
// zero value (do points: moved into the range when 0 is outside it).
func initialValue(c *manifest.Capability) any {
	if c.Simulation != nil && c.Simulation.Initial != nil {
		return c.Simulation.Initial
	}
	if c.Kind == manifest.KindDo && c.SafeValue != nil {
		return c.SafeValue
	}
	switch c.DataType {
	case manifest.TypeBool:
		return false
	case manifest.TypeString:
		return ""
	case manifest.TypeEnum:
		if len(c.EnumValues) > 0 {
			return c.EnumValues[0]
		}
		return ""
	}
	z := 0.0
	if c.Kind == manifest.KindDo && c.Range != nil {
		if r := c.Range; r.Min != nil && z < *r.Min {
			z = *r.Min
		} else if r.Max != nil && z > *r.Max {
			z = *r.Max
		}
	}
	if c.DataType == manifest.TypeInt {
		return int64(math.Ceil(z))
	}
	return z
}

// model is a read point's value over time.
type model struct {
	c           *manifest.Capability
	base        float64
	noise       float64
	wave        *manifest.Waveform
	t0          time.Time
	rate        float64
	implausible any
	follows     string
}

var waveShapes = map[string]func(phase float64) float64{
	"sine": func(p float64) float64 { return math.Sin(2 * math.Pi * p) },
	"triangle": func(p float64) float64 {
		switch {
		case p < 0.25:
			return 4 * p
		case p < 0.75:
			return 2 - 4*p
		}
		return 4*p - 4
	},
	"square": func(p float64) float64 {
		if p < 0.5 {
			return 1
		}
		return -1
	},
	"sawtooth": func(p float64) float64 {
		if p < 0.5 {
			return 2 * p
		}
		return 2*p - 2
	},
}

func newModel(m *manifest.Manifest, c *manifest.Capability, initial any, now time.Time) (*model, error) {
	s := c.Simulation
	md := &model{c: c, noise: s.Noise, wave: s.Wave, t0: now, rate: s.Implausible, follows: s.Follows}
	if math.IsNaN(s.Noise) || s.Noise < 0 || math.IsInf(s.Noise, 0) {
		return nil, fmt.Errorf("simulation noise %v must be a finite number ≥ 0", s.Noise)
	}
	if s.Implausible < 0 || s.Implausible > 1 {
		return nil, fmt.Errorf("simulation implausible_rate %v is outside 0..1", s.Implausible)
	}
	if w := s.Wave; w != nil {
		if waveShapes[w.Shape] == nil {
			return nil, fmt.Errorf("waveform shape %q is not one of sine, triangle, square, sawtooth", w.Shape)
		}
		if !(w.PeriodS > 0) || math.IsInf(w.PeriodS, 0) || math.IsNaN(w.Amplitude) || math.IsInf(w.Amplitude, 0) {
			return nil, fmt.Errorf("waveform needs a positive period_s and a finite amplitude")
		}
	}
	if s.Follows != "" {
		var target *manifest.Capability
		for _, t := range m.Capabilities {
			if t.Name == s.Follows && t.Kind == manifest.KindDo { // a read may share its name
				target = t
			}
		}
		if target == nil || target.Kind != manifest.KindDo {
			return nil, fmt.Errorf("simulation follows %q, which is not a do capability of this manifest", s.Follows)
		}
		if target.IsNumeric() != c.IsNumeric() {
			return nil, fmt.Errorf("simulation follows %s, a %s capability, but this one is %s", target.Name, target.DataType, c.DataType)
		}
	}
	if c.IsNumeric() && s.Follows == "" {
		f, ok := drivers.AsFloat(initial)
		if !ok {
			return nil, fmt.Errorf("simulation initial %v (%T) is not a number", initial, initial)
		}
		md.base = f
	}
	return md, nil
}

// at is the value at time now.
func (md *model) at(now time.Time, rng *rand.Rand, w *world) (any, error) {
	f := md.base
	if md.follows != "" {
		var t *simPoint
		if w != nil {
			t = w.lookup("do_" + md.follows) // by tool: a read may share the do's name
		}
		if t == nil {
			return nil, fmt.Errorf("follows %s, which is not on an open simulated bus", md.follows)
		}
		v := t.last.Load().v
		if !md.c.IsNumeric() {
			return v, nil
		}
		var ok bool
		if f, ok = drivers.AsFloat(v); !ok {
			return nil, fmt.Errorf("follows %s, whose value %v is not a number", md.follows, v)
		}
	}
	if md.wave != nil {
		cycles := now.Sub(md.t0).Seconds() / md.wave.PeriodS
		f += md.wave.Amplitude * waveShapes[md.wave.Shape](cycles-math.Floor(cycles))
	}
	if md.noise > 0 {
		f += rng.NormFloat64() * md.noise
	}
	if md.rate > 0 && rng.Float64() < md.rate {
		return md.implausible, nil
	}
	if md.c.DataType == manifest.TypeInt {
		return int64(math.Round(f)), nil
	}
	return f, nil
}

// implausibleValue finds a value outside the capability's range that its
// binding can hold, trying well outside first.
func implausibleValue(c *manifest.Capability, cl cell) (any, error) {
	r := c.Range
	if r == nil || (r.Min == nil && r.Max == nil) {
		return nil, fmt.Errorf("simulation implausible_rate needs a range to step outside of")
	}
	step := 1.0
	if r.Min != nil && r.Max != nil {
		step = math.Max(step, (*r.Max-*r.Min)/2)
	}
	var candidates []float64
	if r.Max != nil {
		candidates = append(candidates, *r.Max+step, *r.Max+1)
	}
	if r.Min != nil {
		candidates = append(candidates, *r.Min-step, *r.Min-1)
	}
	for _, f := range candidates {
		var v any = f
		if c.DataType == manifest.TypeInt {
			v = int64(math.Round(f))
		}
		if cl.store(v) != nil {
			continue
		}
		got, flag, err := cl.load()
		g, _ := drivers.AsFloat(got)
		if err == nil && (flag != "" || (r.Max != nil && g > *r.Max) || (r.Min != nil && g < *r.Min)) {
			return got, nil
		}
	}
	return nil, fmt.Errorf("simulation implausible_rate: no value outside the range fits the binding")
}
