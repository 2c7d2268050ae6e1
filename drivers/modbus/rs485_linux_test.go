package modbus

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// struct serial_rs485 and its ioctls as include/uapi/linux/serial.h and
// asm-generic/ioctls.h give them (the same on arm, arm64 and amd64).
func TestSerialRS485ABI(t *testing.T) {
	if s := unsafe.Sizeof(serialRS485{}); s != 32 {
		t.Errorf("sizeof(struct serial_rs485) = %d, want 32", s)
	}
	if o := unsafe.Offsetof(serialRS485{}.DelayRTSAfterSend); o != 8 {
		t.Errorf("delay_rts_after_send at %d, want 8", o)
	}
	if unix.TIOCSRS485 != 0x542F || unix.TIOCGRS485 != 0x542E {
		t.Errorf("TIOCSRS485 %#x TIOCGRS485 %#x, want 0x542f 0x542e", unix.TIOCSRS485, unix.TIOCGRS485)
	}
	if serRS485Enabled != 1 || serRS485RTSOnSend != 2 || serRS485RTSAfterSend != 4 || serRS485RXDuringTX != 16 {
		t.Error("SER_RS485_* flags differ from linux/serial.h")
	}
}
