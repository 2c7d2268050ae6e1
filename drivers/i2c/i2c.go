// Package i2c is the real I2C driver: a Linux adapter (/dev/i2c-N) through
// periph.io. The periph-facing part is Open; Bus holds the logic (one
// transaction at a time, bounded retries of reads, errors that name the bus,
// the address and the register) and works on any periph i2c.Bus, so it is
// tested against periph's i2ctest doubles.
//
// A write (a transaction that reads nothing) is never repeated, and once it
// has started, a failure wraps drivers.ErrInDoubt: the i2c-dev ioctl returns
// one errno for the whole transfer, and adapters report a NACK on a data byte
// (the register pointer and earlier bytes already latched) the same way as
// one on the address byte (i2c-bcm2835 gives EREMOTEIO for both, i2c-imx
// ENXIO), while a timeout or lost arbitration stops mid-transfer. So the
// kernel cannot say whether the device took the write.
package i2c

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/host/v3/sysfs"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

const maxRetries = 10

var devicePattern = regexp.MustCompile(`^(/dev/i2c-)?([0-9]+)$`)

// Open opens the manifest's I2C adapter (drivers.Opener).
func Open(_ context.Context, _ *manifest.Manifest, b *manifest.Bus) (drivers.Bus, error) {
	c := b.I2C
	if c == nil {
		return nil, fmt.Errorf("bus %q: no i2c settings", b.Name)
	}
	m := devicePattern.FindStringSubmatch(c.Device)
	if m == nil {
		// Never "": periph would open the first adapter it finds.
		return nil, fmt.Errorf("bus %q: device %q: want an adapter number N or /dev/i2c-N", b.Name, c.Device)
	}
	if c.Retries < 0 || c.Retries > maxRetries {
		return nil, fmt.Errorf("bus %q: retries %d: must be 0..%d", b.Name, c.Retries, maxRetries)
	}
	if c.TimeoutMs < 0 {
		return nil, fmt.Errorf("bus %q: timeout_ms %d: must not be negative", b.Name, c.TimeoutMs)
	}
	path := "/dev/i2c-" + m[2]
	// The adapter is opened directly rather than through periph's host
	// registry: host.Init enumerates the adapters once per process (one that
	// appears later would never be found) and, on arm, links and starts every
	// board driver periph has (Allwinner, BCM283x, ...), which I2C does not use.
	n, _ := strconv.Atoi(m[2])
	open := func() (i2c.BusCloser, error) {
		// the setting belongs to the adapter: one that came back has lost it
		if c.TimeoutMs > 0 {
			if err := setAdapterTimeout(path, c.TimeoutMs); err != nil {
				return nil, err
			}
		}
		dev, err := sysfs.NewI2C(n)
		if err != nil {
			return nil, fmt.Errorf("%w: opening %s: %w", drivers.ErrUnreachable, path, err)
		}
		return dev, nil
	}
	dev, err := open()
	if err != nil {
		return nil, fmt.Errorf("bus %q: %w", b.Name, err)
	}
	bus := New("i2c "+path, dev, c.Retries)
	bus.reopen = open
	return bus, nil
}

// Bus is one I2C adapter. It implements drivers.I2CBus.
type Bus struct {
	desc    string
	dev     i2c.BusCloser // nil once closed after the adapter went away
	retries int
	// reopen opens the adapter again after it went away (a USB adapter
	// unplugged): nil, never.
	reopen func() (i2c.BusCloser, error)
	// lock is a one-slot semaphore rather than a mutex so that waiting for
	// the bus gives up when the caller's context does.
	lock chan struct{}
}

var _ drivers.I2CBus = (*Bus)(nil)

// New wraps an opened periph bus; retries is how many times a failed read
// transaction is repeated.
func New(desc string, dev i2c.BusCloser, retries int) *Bus {
	return &Bus{desc: desc, dev: dev, retries: retries, lock: make(chan struct{}, 1)}
}

// Describe names the adapter ("i2c /dev/i2c-1").
func (b *Bus) Describe() string { return b.desc }

// Close releases the adapter.
func (b *Bus) Close() error {
	b.lock <- struct{}{}
	defer func() { <-b.lock }()
	dev := b.dev
	b.dev, b.reopen = nil, nil
	if dev == nil {
		return nil
	}
	return dev.Close()
}

// TxError is a failed transaction, naming the bus, the address and (by the
// usual convention that a register-addressed device takes the register as
// the first byte written) the register.
type TxError struct {
	Bus      string
	Addr     uint16
	W        []byte
	ReadLen  int
	Attempts int
	Err      error
}

func (e *TxError) Error() string {
	s := fmt.Sprintf("%s: address %#02x", e.Bus, e.Addr)
	if len(e.W) > 0 {
		s += fmt.Sprintf(" register %#02x", e.W[0])
	}
	s += fmt.Sprintf(" (write %d bytes, read %d)", len(e.W), e.ReadLen)
	if e.Attempts > 1 {
		s += fmt.Sprintf(" after %d attempts", e.Attempts)
	}
	return s + ": " + e.Err.Error()
}

func (e *TxError) Unwrap() error { return e.Err }

// Tx writes w then reads len(r) bytes from the 7-bit address addr, as one
// combined transaction. Transactions on the bus are serialised; a failed read
// is repeated up to the bus's retries while ctx lasts. A write (r empty) is
// tried once: a failure before it started was not applied, one after wraps
// drivers.ErrInDoubt.
func (b *Bus) Tx(ctx context.Context, addr uint16, w, r []byte) error {
	fail := func(attempts int, err error) error {
		return &TxError{Bus: b.desc, Addr: addr, W: w, ReadLen: len(r), Attempts: attempts, Err: err}
	}
	if addr > 0x7F {
		return fail(0, errors.New("not a 7-bit address"))
	}
	select {
	case b.lock <- struct{}{}:
	case <-ctx.Done():
		return fail(0, notSent(ctxError(ctx.Err(), "while waiting for the bus")))
	}
	defer func() { <-b.lock }()
	if b.dev == nil {
		if b.reopen == nil {
			return fail(0, errors.New("closed"))
		}
		dev, err := b.reopen()
		if err != nil {
			return fail(0, err)
		}
		b.dev = dev
	}
	write := len(r) == 0
	tries := 1
	if !write {
		tries += b.retries
	}
	var err error
	attempts := 0
	for attempts < tries {
		if ctx.Err() != nil {
			if attempts == 0 {
				return fail(0, notSent(ctxError(ctx.Err(), "before the transfer started")))
			}
			break
		}
		attempts++
		if err = b.dev.Tx(addr, w, r); err == nil {
			return nil
		}
		if b.gone(err) {
			break
		}
	}
	err = classify(err)
	if write {
		err = fmt.Errorf("%w: %w", drivers.ErrInDoubt, err)
	}
	return fail(attempts, err)
}

// gone closes the adapter when err says it went away (ENODEV: a USB
// adapter unplugged), so the next transaction opens it again: the kernel
// keeps the old adapter, and its number, while a file holds it open, and
// answers nothing but ENODEV on it meanwhile. Without a way to reopen, it
// stays as it is.
func (b *Bus) gone(err error) bool {
	if b.reopen == nil || !adapterGone(err) {
		return false
	}
	_ = b.dev.Close()
	b.dev = nil
	return true
}

// adapterGone says whether err is ENODEV (periph formats the errno with %v;
// ENXIO, a NACK, reads "no such device or address").
func adapterGone(err error) bool {
	return strings.HasSuffix(err.Error(), ": "+syscall.ENODEV.Error())
}

// notSent marks err, which came before any transfer started.
func notSent(err error) error { return fmt.Errorf("%w: %w", drivers.ErrNotSent, err) }

func ctxError(err error, what string) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: deadline passed %s (%w)", drivers.ErrTimeout, what, err)
	}
	return fmt.Errorf("%w %s", err, what)
}

// classify adds drivers.ErrTimeout or drivers.ErrUnreachable to an adapter
// error. periph formats the errno with %v, so only its text is left to go by.
func classify(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "timed out"): // ETIMEDOUT: clock stretched too long, or qemu's NACK
		return fmt.Errorf("%w: %w", drivers.ErrTimeout, err)
	case adapterGone(err):
		return fmt.Errorf("%w: the adapter went away: %w", drivers.ErrUnreachable, err)
	case strings.Contains(msg, "no such device or address"), // ENXIO: NACK on most adapters
		strings.Contains(msg, "remote I/O error"): // EREMOTEIO: NACK on others
		return fmt.Errorf("%w: no device acknowledged: %w", drivers.ErrUnreachable, err)
	}
	return err
}
