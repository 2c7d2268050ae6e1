package modbus

import (
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/physmcp/physmcpd/manifest"
)

// setRS485 asks the UART driver to drive the transceiver's direction
// (TIOCSRS485). The setting belongs to the port, not to the file descriptor,
// so a short-lived descriptor is enough. The kernel may quietly change what
// its driver cannot honour (an RTS level, a delay), so the result is read back
// and every difference named.
func setRS485(path string, r *manifest.RS485) error {
	want := kernelRS485(r)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("rs485: opening: %w", err)
	}
	defer unix.Close(fd)
	set := want
	if err := ioctlPtr(fd, unix.TIOCSRS485, unsafe.Pointer(&set)); err != nil {
		return fmt.Errorf("rs485: the port's driver refused TIOCSRS485 (not an RS-485 capable UART? USB adapters and ptys have no kernel mode: use direction auto, rts or gpio): %w", err)
	}
	var got serialRS485
	if err := ioctlPtr(fd, unix.TIOCGRS485, unsafe.Pointer(&got)); err != nil {
		return fmt.Errorf("rs485: reading the settings back (TIOCGRS485): %w", err)
	}
	if d := rs485Diff(want, got); d != "" {
		return fmt.Errorf("rs485: the driver changed the kernel RS-485 settings: %s", d)
	}
	return nil
}

// portCtl is a second descriptor of an open port, for what the serial
// library does not offer: tcdrain with the line status, and RTS alone.
type portCtl struct{ fd int }

func openCtl(path string) (*portCtl, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &portCtl{fd: fd}, nil
}

func (c *portCtl) close() { unix.Close(c.fd) }

// setRTS asserts or clears RTS alone (TIOCMBIS, TIOCMBIC), leaving DTR be.
func (c *portCtl) setRTS(on bool) error {
	req := uint(unix.TIOCMBIC)
	if on {
		req = unix.TIOCMBIS
	}
	bits := int32(unix.TIOCM_RTS)
	if err := ioctlPtr(c.fd, req, unsafe.Pointer(&bits)); err != nil {
		return fmt.Errorf("setting RTS (the port has no RTS line?): %w", err)
	}
	return nil
}

// waitSent returns once the last stop bit has left: tcdrain empties the
// kernel's buffer (serial-core UARTs also wait for their transmitter); where
// the driver reports the line status, its transmitter-empty bit confirms the
// shift register is empty, polled for at most two characters. Drivers without
// it (USB adapters, ptys) get one character time for the last character.
// sleep is the direction's wait.
func (c *portCtl) waitSent(charTime time.Duration, sleep func(time.Duration)) error {
	if err := ioctlInt(c.fd, unix.TCSBRK, 1); err != nil {
		return fmt.Errorf("tcdrain: %w", err)
	}
	for end := time.Now().Add(2 * charTime); ; {
		lsr, err := unix.IoctlGetInt(c.fd, unix.TIOCSERGETLSR)
		if err != nil {
			sleep(charTime)
			return nil
		}
		if lsr&unix.TIOCSER_TEMT != 0 || time.Now().After(end) {
			return nil
		}
		sleep(charTime / 8)
	}
}

// sleep waits d with the kernel's high-resolution timer: time.Sleep waits for
// the runtime's poller, which rounds up to the next millisecond, and a switch
// that late can talk over a device's reply above 9600 baud.
func sleep(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	for d > 0 && unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}

// ioctlPtr and ioctlInt retry on EINTR: tcdrain blocks, and the Go runtime
// interrupts blocked system calls to preempt goroutines.
func ioctlPtr(fd int, req uint, arg unsafe.Pointer) error {
	return retryEINTR(func() unix.Errno {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
		return errno
	})
}

func ioctlInt(fd int, req uint, arg int) error {
	return retryEINTR(func() unix.Errno {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
		return errno
	})
}

func retryEINTR(call func() unix.Errno) error {
	for {
		switch errno := call(); errno {
		case 0:
			return nil
		case unix.EINTR:
		default:
			return errno
		}
	}
}
