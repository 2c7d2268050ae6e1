package sim

import (
	"context"
	"fmt"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/codec"
	"github.com/physmcp/physmcpd/manifest"
)

// I2C simulates an I2C adapter with one register-map device per address a
// capability is bound to. A device has 256 byte registers and an
// auto-incrementing register pointer: a transaction writes the pointer (w[0]),
// then any data bytes (w[1:]) from there, then reads len(r) bytes from where
// the pointer has got to. An address with no device fails like a NACK.
type I2C struct {
	*core
	devices map[uint16]*i2cDevice
}

type i2cDevice struct {
	mem [256]byte
	ptr byte
}

func newI2C(c *core, caps []*manifest.Capability) (*I2C, error) {
	s := &I2C{core: c, devices: map[uint16]*i2cDevice{}}
	for _, cp := range caps {
		ib := cp.Binding.I2C
		if ib == nil {
			return nil, fmt.Errorf("capability %s on an i2c bus has no i2c binding", cp.Name)
		}
		enc, err := codec.NewI2C(ib, cp)
		if err != nil {
			return nil, fmt.Errorf("capability %s: %w", cp.Name, err)
		}
		if ib.Address > 0x7f {
			return nil, fmt.Errorf("capability %s: address 0x%x is not a 7-bit address", cp.Name, ib.Address)
		}
		if int(ib.Register)+enc.Width() > 256 {
			return nil, fmt.Errorf("capability %s: %d bytes from register 0x%02x run past 0xff", cp.Name, enc.Width(), ib.Register)
		}
		d := s.devices[ib.Address]
		if d == nil {
			d = &i2cDevice{}
			s.devices[ib.Address] = d
		}
		if err := c.add(cp, &i2cCell{d: d, b: ib, enc: enc}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

type i2cCell struct {
	d   *i2cDevice
	b   *manifest.I2CBinding
	enc *codec.I2C
}

func (ic *i2cCell) region() region {
	return region{uint32(ic.b.Address), int(ic.b.Register), int(ic.b.Register) + ic.enc.Width()}
}

func (ic *i2cCell) bytes() []byte { return ic.d.mem[ic.b.Register : int(ic.b.Register)+ic.enc.Width()] }

func (ic *i2cCell) store(v any) error {
	data, err := ic.enc.Encode(v, ic.bytes())
	if err != nil {
		return err
	}
	copy(ic.bytes(), data)
	return nil
}

func (ic *i2cCell) load() (any, string, error) { return ic.enc.Decode(ic.bytes()) }

// Tx writes w then reads len(r) bytes from the device at addr.
func (s *I2C) Tx(ctx context.Context, addr uint16, w, r []byte) error {
	if err := s.transact(ctx); err != nil {
		return err
	}
	d := s.devices[addr] // fixed after open
	if d == nil {
		return fmt.Errorf("no device at 0x%02x (address not acknowledged): %w", addr, drivers.ErrUnreachable)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(w) > 0 {
		d.ptr = w[0]
		if data := w[1:]; len(data) > 0 {
			start := int(d.ptr)
			for _, c := range data {
				d.mem[d.ptr] = c
				d.ptr++
			}
			var touched []region
			s.spans(addr, start, len(data), func(q region) { touched = append(touched, q) })
			if err := s.written(touched...); err != nil {
				return err
			}
		}
	}
	if len(r) > 0 {
		var err error
		s.spans(addr, int(d.ptr), len(r), func(q region) {
			if err == nil {
				err = s.refresh(q)
			}
		})
		if err != nil {
			return err
		}
		for i := range r {
			r[i] = d.mem[d.ptr]
			d.ptr++
		}
	}
	return nil
}

// spans calls f with the register span [start, start+n), split where the
// register pointer wraps from 0xff to 0x00.
func (s *I2C) spans(addr uint16, start, n int, f func(region)) {
	for n > 0 {
		k := min(n, 256-start)
		f(region{uint32(addr), start, start + k})
		start, n = 0, n-k
	}
}
