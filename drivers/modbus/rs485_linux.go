package modbus

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/physmcp/physmcpd/manifest"
)

// serialRS485 is the kernel's struct serial_rs485 (include/uapi/linux/serial.h).
type serialRS485 struct {
	Flags              uint32
	DelayRTSBeforeSend uint32 // milliseconds
	DelayRTSAfterSend  uint32 // milliseconds
	Padding            [5]uint32
}

const (
	serRS485Enabled      = 1 << 0
	serRS485RTSOnSend    = 1 << 1
	serRS485RTSAfterSend = 1 << 2
	serRS485RXDuringTX   = 1 << 4
)

// setRS485 asks the UART driver to drive the transceiver's direction
// (TIOCSRS485). The setting belongs to the port, not to the file descriptor,
// so a short-lived descriptor is enough. The kernel may quietly drop flags its
// driver cannot honour, so the result is read back and compared.
func setRS485(path string, r *manifest.RS485) error {
	want := serialRS485{
		Flags: serRS485Enabled,
		// The kernel counts whole milliseconds; rounding up keeps at least the configured delay.
		DelayRTSBeforeSend: uint32((r.DelayRTSBeforeSendUs + 999) / 1000),
		DelayRTSAfterSend:  uint32((r.DelayRTSAfterSendUs + 999) / 1000),
	}
	if r.RTSOnSend {
		want.Flags |= serRS485RTSOnSend
	}
	if r.RTSAfterSend {
		want.Flags |= serRS485RTSAfterSend
	}
	if r.RXDuringTX {
		want.Flags |= serRS485RXDuringTX
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("rs485: opening: %w", err)
	}
	defer unix.Close(fd)
	set := want
	if err := ioctl(fd, unix.TIOCSRS485, &set); err != nil {
		return fmt.Errorf("rs485: the port's driver refused TIOCSRS485 (not an RS-485 capable UART?): %w", err)
	}
	var got serialRS485
	if err := ioctl(fd, unix.TIOCGRS485, &got); err != nil {
		return fmt.Errorf("rs485: reading the settings back (TIOCGRS485): %w", err)
	}
	const mask = serRS485Enabled | serRS485RTSOnSend | serRS485RTSAfterSend | serRS485RXDuringTX
	if got.Flags&mask != want.Flags || got.DelayRTSBeforeSend != want.DelayRTSBeforeSend || got.DelayRTSAfterSend != want.DelayRTSAfterSend {
		return fmt.Errorf("rs485: the driver changed the settings: asked flags %#x delays %d/%d ms, got flags %#x delays %d/%d ms",
			want.Flags, want.DelayRTSBeforeSend, want.DelayRTSAfterSend, got.Flags&mask, got.DelayRTSBeforeSend, got.DelayRTSAfterSend)
	}
	return nil
}

func ioctl(fd int, req uint, arg *serialRS485) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(arg)))
	if errno != 0 {
		return errno
	}
	return nil
}
