package modbusfault

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RTU is a Modbus RTU device on the master side of a pseudo-terminal; the
// client opens Path like a serial port (a pty has no baud rate). It answers
// every unit id except broadcast (0), and drops frames with a bad CRC as a
// device on a noisy line would.
type RTU struct {
	*Device
	ptm  *os.File
	path string // the link clients open
	pts  string
	once sync.Once
	wg   sync.WaitGroup
}

// StartRTU opens a pseudo-terminal and serves on it until the test ends.
func StartRTU(tb testing.TB) *RTU {
	tb.Helper()
	ptm, pts, err := openPTY()
	if err != nil {
		tb.Fatalf("modbusfault: %v", err)
	}
	// Clients get a link that Close removes: once this pseudo-terminal is
	// gone its /dev/pts/N number is reused, and a client reopening the port
	// after an error (as drivers do) would otherwise talk to another test's
	// device, in this process or another.
	path := filepath.Join(tb.TempDir(), "ttyFAULT")
	if err := os.Symlink(pts, path); err != nil {
		ptm.Close()
		tb.Fatalf("modbusfault: %v", err)
	}
	s := &RTU{Device: newDevice(), ptm: ptm, path: path, pts: pts}
	s.wg.Go(s.serve)
	tb.Cleanup(s.Close)
	return s
}

// Path is the serial port to open: a link to /dev/pts/N that lives as long
// as the device.
func (s *RTU) Path() string { return s.path }

// PTY is the pseudo-terminal itself, /dev/pts/N, for a client that needs a
// device path and holds it open for the device's life (qemu's -serial).
func (s *RTU) PTY() string { return s.pts }

// Close stops the server, removes the link and closes the pseudo-terminal.
func (s *RTU) Close() {
	s.once.Do(func() {
		close(s.done)
		_ = os.Remove(s.path)
		s.ptm.Close()
		s.wg.Wait()
		s.later.Wait()
	})
}

func (s *RTU) serve() {
	var buf []byte
	chunk := make([]byte, 512)
	for {
		n, err := s.ptm.Read(chunk)
		if errors.Is(err, syscall.EIO) {
			// No one has the slave side open (yet, or between a client's
			// close and reopen): what was pending is lost with it.
			buf = buf[:0]
			if !s.wait(5*time.Millisecond, nil) {
				return
			}
			continue
		}
		if err != nil {
			return
		}
		buf = append(buf, chunk[:n]...)
		for {
			size := requestLen(buf)
			if size < 0 {
				buf = buf[:0] // not a request this device understands: resynchronise
			}
			if size <= 0 || len(buf) < size {
				break
			}
			reply, heard := s.frame(buf[:size])
			var err error
			if reply != nil {
				_, err = s.ptm.Write(reply)
			}
			if heard {
				s.finished(buf[1])
			}
			if err != nil {
				return
			}
			buf = buf[size:]
		}
	}
}

// frame handles one request frame and returns the reply frame, or nil.
// heard is false for a frame the device ignores unseen (broadcast, bad CRC).
func (s *RTU) frame(req []byte) (reply []byte, heard bool) {
	unit := req[0]
	if unit == 0 || crc(req[:len(req)-2]) != binary.LittleEndian.Uint16(req[len(req)-2:]) {
		return nil, false
	}
	o := s.handle(unit, req[1:len(req)-2])
	switch o.mode {
	case ApplyDrop, ApplyNoReply, ApplyFIN, ApplyRST, Hang:
		return nil, true
	}
	if !s.hold(&o) {
		return nil, true
	}
	reply = append([]byte{unit}, o.pdu...)
	reply = binary.LittleEndian.AppendUint16(reply, crc(reply))
	if o.mode == Garble {
		reply[len(reply)-1] ^= 0x5A
	}
	return reply, true
}

// requestLen is the length of the RTU request frame that starts with b, 0
// while too few bytes have arrived to tell, or -1 for an unknown function.
func requestLen(b []byte) int {
	if len(b) < 2 {
		return 0
	}
	switch b[1] {
	case 1, 2, 3, 4, 5, 6:
		return 8 // unit, function, address, count or value, CRC
	case 15, 16:
		if len(b) < 7 {
			return 0
		}
		return 9 + int(b[6]) // ... count, byte count, data, CRC
	}
	return -1
}

// crc is the Modbus RTU CRC-16 (polynomial 0xA001 reflected, initial 0xFFFF),
// sent low byte first.
func crc(b []byte) uint16 {
	c := uint16(0xFFFF)
	for _, x := range b {
		c ^= uint16(x)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ 0xA001
			} else {
				c >>= 1
			}
		}
	}
	return c
}
