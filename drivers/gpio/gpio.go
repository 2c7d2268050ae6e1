// Package gpio is the real GPIO driver: the Linux GPIO character device
// (/dev/gpiochipN) through its v2 uAPI ioctls (uapi.go), never the legacy
// sysfs interface.
//
// Each line is requested with everything it needs in one ioctl: direction,
// bias, active-low and, for an output, its starting value, so an output goes
// straight to its safe level without passing through another one (periph.io's
// gpioioctl, used before, could not give a starting value and drove a line
// low before setting it high). The kernel applies active-low, so levels here
// are logical. The chip is found by label (fallback: path), the line by name
// or offset on that chip. A line another consumer holds is reported with the
// holder's name and as drivers.ErrUnreachable.
package gpio

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

// consumer is the label the kernel shows for lines physmcpd holds (gpioinfo).
const consumer = "physmcpd"

// dev is the character device's system calls; tests replace the kernel.
type dev interface {
	ioctl(fd int, req uint, arg unsafe.Pointer) error
	close(fd int) error
}

// hwChip describes one chip as found on the system.
type hwChip struct {
	name  string // gpiochipN
	label string // the driver's label, stable across kernels
	path  string // /dev/gpiochipN
	lines int
}

// Open finds the manifest's chip among the system's GPIO character devices (drivers.Opener).
func Open(_ context.Context, _ *manifest.Manifest, b *manifest.Bus) (drivers.Bus, error) {
	if b.GPIO == nil {
		return nil, fmt.Errorf("bus %q: no gpio settings", b.Name)
	}
	chips, err := systemChips()
	if err != nil {
		return nil, fmt.Errorf("bus %q: %w: %w", b.Name, drivers.ErrUnreachable, err)
	}
	hw, err := findChip(chips, b.GPIO.Chip, b.GPIO.Path)
	if err != nil {
		return nil, fmt.Errorf("bus %q: %w", b.Name, err)
	}
	fd, err := openChip(hw.path)
	if err != nil {
		return nil, fmt.Errorf("bus %q: %w: %w", b.Name, drivers.ErrUnreachable, err)
	}
	return newChip(hw, kernelDev{}, fd), nil
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

// Chip is one opened GPIO chip. It implements drivers.GPIOChip.
type Chip struct {
	hw  hwChip
	dev dev
	fd  int // the chip's character device

	mu    sync.Mutex
	lines []*Line // requested, released by Close
}

var _ drivers.GPIOChip = (*Chip)(nil)

func newChip(hw hwChip, d dev, fd int) *Chip { return &Chip{hw: hw, dev: d, fd: fd} }

// Describe names the chip ("gpio /dev/gpiochip0 (209c000.gpio)").
func (c *Chip) Describe() string { return fmt.Sprintf("gpio %s (%s)", c.hw.path, c.hw.label) }

// info asks the kernel about the line at offset: its name, flags and holder.
func (c *Chip) info(offset int) (lineInfo, error) {
	info := lineInfo{Offset: uint32(offset)}
	if err := c.dev.ioctl(c.fd, ioctlLineInfo, unsafe.Pointer(&info)); err != nil {
		return lineInfo{}, fmt.Errorf("line %d on %s: line info: %w", offset, c.hw.name, err)
	}
	return info, nil
}

// Line finds a line by name, or by offset when name is empty, and requests
// it. An output starts at cfg.Initial (its safe level): the value is part of
// the request, so the line never shows another level on the way.
func (c *Chip) Line(name string, offset int, cfg drivers.LineConfig) (drivers.GPIOLine, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return nil, fmt.Errorf("%s: closed", c.Describe())
	}
	offset, name, err := c.find(name, offset)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Describe(), err)
	}
	req, err := request(offset, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: line %d (%q): %w", c.Describe(), offset, name, err)
	}
	if err := c.dev.ioctl(c.fd, ioctlGetLine, unsafe.Pointer(&req)); err != nil {
		return nil, fmt.Errorf("%s: %w", c.Describe(), c.requestError(offset, name, err))
	}
	l := &Line{chip: c, offset: offset, name: name, fd: int(req.Fd), cfg: cfg}
	c.lines = append(c.lines, l)
	return l, nil
}

// find returns the offset and name of the line named name or, when name is
// empty, at offset.
func (c *Chip) find(name string, offset int) (int, string, error) {
	if name == "" {
		if offset < 0 || offset >= c.hw.lines {
			return 0, "", fmt.Errorf("line offset %d: the chip has lines 0..%d", offset, c.hw.lines-1)
		}
		info, err := c.info(offset)
		if err != nil {
			return 0, "", err
		}
		return offset, cstring(info.Name[:]), nil
	}
	for off := range c.hw.lines {
		info, err := c.info(off)
		if err != nil {
			return 0, "", err
		}
		if cstring(info.Name[:]) == name {
			return off, name, nil
		}
	}
	return 0, "", fmt.Errorf("%w: no line named %q on %s", drivers.ErrUnreachable, name, c.hw.name)
}

// request builds the v2 line request for one line.
func request(offset int, cfg drivers.LineConfig) (lineRequest, error) {
	req := lineRequest{NumLines: 1}
	req.Offsets[0] = uint32(offset)
	copy(req.Consumer[:maxNameSize-1], consumer)
	if cfg.ActiveLow {
		req.Config.Flags |= flagActiveLow
	}
	switch cfg.Direction {
	case manifest.DirInput:
		req.Config.Flags |= flagInput
		// A chip whose driver cannot set a bias keeps the line as it is:
		// gpiolib drops ENOTSUPP for bias on line requests, so nothing says so.
		switch cfg.Bias {
		case "", "as-is":
		case "pull-up":
			req.Config.Flags |= flagBiasPullUp
		case "pull-down":
			req.Config.Flags |= flagBiasPullDown
		case "disable":
			req.Config.Flags |= flagBiasDisabled
		default:
			return lineRequest{}, fmt.Errorf("bias %q: want as-is, pull-up, pull-down or disable", cfg.Bias)
		}
	case manifest.DirOutput:
		if cfg.Bias != "" && cfg.Bias != "as-is" {
			// The kernel would accept it, but a push-pull output drives the
			// line itself: a pull resistor there only wastes current.
			return lineRequest{}, fmt.Errorf("bias %q on an output: bias applies to inputs", cfg.Bias)
		}
		req.Config.Flags |= flagOutput
		// The starting value rides in the request (logical: the kernel
		// applies active-low), so the line is never driven to the other level.
		req.Config.NumAttrs = 1
		req.Config.Attrs[0] = lineConfigAttribute{Attr: lineAttribute{ID: attrIDOutputValues, Value: bit(cfg.Initial)}, Mask: 1}
	default:
		return lineRequest{}, fmt.Errorf("direction %q: want input or output", cfg.Direction)
	}
	return req, nil
}

func bit(level bool) uint64 {
	if level {
		return 1
	}
	return 0
}

// requestError explains a refused line request. A busy line names its
// holder as the kernel reports it and wraps drivers.ErrUnreachable: another
// driver or process has it, which may change while physmcpd runs.
func (c *Chip) requestError(offset int, name string, err error) error {
	what := fmt.Sprintf("line %d (%q) on %s", offset, name, c.hw.name)
	if errors.Is(err, syscall.EBUSY) {
		holder := "a consumer that gave no name"
		if info, ierr := c.info(offset); ierr == nil && cstring(info.Consumer[:]) != "" {
			holder = fmt.Sprintf("%q", cstring(info.Consumer[:]))
		}
		return fmt.Errorf("%w: %s is busy: held by %s", drivers.ErrUnreachable, what, holder)
	}
	return fmt.Errorf("requesting %s: %w", what, err)
}

// Close drives every output back to its safe level and releases the lines
// and the chip.
func (c *Chip) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return nil
	}
	var errs []error
	for _, l := range c.lines {
		if err := l.release(); err != nil {
			errs = append(errs, err)
		}
	}
	c.lines = nil
	if err := c.dev.close(c.fd); err != nil {
		errs = append(errs, fmt.Errorf("%s: closing: %w", c.Describe(), err))
	}
	c.fd = -1
	return errors.Join(errs...)
}

// Line is one requested line. It implements drivers.GPIOLine.
type Line struct {
	chip   *Chip
	offset int
	name   string
	cfg    drivers.LineConfig

	mu sync.Mutex
	fd int // the line request; -1 once released
}

func (l *Line) describe() string {
	return fmt.Sprintf("%s line %d (%q)", l.chip.Describe(), l.offset, l.name)
}

// Read returns the line's logical level: an input's, or the level an
// output drives (the v2 uAPI reads an output without changing its direction).
func (l *Line) Read(ctx context.Context) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fd < 0 {
		return false, fmt.Errorf("%s: released", l.describe())
	}
	v := lineValues{Mask: 1}
	if err := l.chip.dev.ioctl(l.fd, ioctlGetValues, unsafe.Pointer(&v)); err != nil {
		return false, fmt.Errorf("%s: reading: %w", l.describe(), err)
	}
	return v.Bits&1 != 0, nil
}

// Write drives an output to the logical level, once. A failure the kernel
// gives before any chip driver runs is not in doubt; any other may be (setError).
func (l *Line) Write(ctx context.Context, level bool) error {
	if l.cfg.Direction != manifest.DirOutput {
		return fmt.Errorf("%s: %w", l.describe(), drivers.ErrNotWritable)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", drivers.ErrNotSent, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fd < 0 {
		return fmt.Errorf("%s: released", l.describe())
	}
	if err := l.set(level); err != nil {
		return fmt.Errorf("%s: writing %v: %w", l.describe(), level, setError(err))
	}
	return nil
}

// setError classifies a refused SET_VALUES. gpiolib-cdev refuses an input,
// an empty mask, a bad buffer or fd, and a chip that is gone (ENODEV) before
// any chip driver runs: nothing was set. Any other error is the chip
// driver's own (kernels whose chip setters return errors pass it on): on an
// expander behind I2C or SPI (pca953x, mcp23s08) the level goes out as a bus
// transfer, which can fail after the expander latched it, so the write wraps
// drivers.ErrInDoubt and the engine settles it by reading the line.
func setError(err error) error {
	for _, refused := range []syscall.Errno{syscall.EPERM, syscall.EINVAL, syscall.EFAULT, syscall.EBADF, syscall.ENOTTY, syscall.ENOMEM, syscall.ENODEV} {
		if errors.Is(err, refused) {
			return err
		}
	}
	return fmt.Errorf("%w: %w", drivers.ErrInDoubt, err)
}

func (l *Line) set(level bool) error {
	v := lineValues{Bits: bit(level), Mask: 1}
	return l.chip.dev.ioctl(l.fd, ioctlSetValues, unsafe.Pointer(&v))
}

// release returns an output to its safe level (the kernel keeps driving a
// released line at its last level) and gives the line back.
func (l *Line) release() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	if l.cfg.Direction == manifest.DirOutput {
		if err := l.set(l.cfg.Initial); err != nil {
			errs = append(errs, fmt.Errorf("%s: returning to the safe level: %w", l.describe(), err))
		}
	}
	if err := l.chip.dev.close(l.fd); err != nil {
		errs = append(errs, fmt.Errorf("%s: releasing: %w", l.describe(), err))
	}
	l.fd = -1
	return errors.Join(errs...)
}
