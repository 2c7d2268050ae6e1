package modbusfault

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"testing"
	"time"
)

func TestCRC(t *testing.T) {
	// The specification's example: read 10 holding registers from unit 1.
	req, _ := hex.DecodeString("01030000000a")
	if got := crc(req); got != 0xCDC5 { // sent C5 CD
		t.Fatalf("crc = %#04x, want 0xcdc5", got)
	}
}

func TestFaultsAreUsedUpInOrder(t *testing.T) {
	d := newDevice()
	d.Inject(Fault{Mode: Exception, Match: At(6, 10), Times: 2})
	d.Inject(Fault{Mode: ApplyNoReply, Match: OnFunction(6), Times: 1})
	write := []byte{6, 0, 10, 0, 7}
	var modes []Mode
	for range 4 {
		modes = append(modes, d.handle(1, write).mode)
	}
	want := []Mode{Exception, Exception, ApplyNoReply, Normal}
	for i := range want {
		if modes[i] != want[i] {
			t.Fatalf("modes %v, want %v", modes, want)
		}
	}
	// The no-reply and the normal request applied; the exceptions did not.
	if d.Writes(HoldingRegisters, 10) != 2 || d.Value(HoldingRegisters, 10) != 7 || d.Requests(6) != 4 {
		t.Fatalf("writes %d, value %d, requests %d", d.Writes(HoldingRegisters, 10), d.Value(HoldingRegisters, 10), d.Requests(6))
	}
	if o := d.handle(1, []byte{3, 0, 10, 0, 1}); string(o.pdu) != string([]byte{3, 2, 0, 7}) {
		t.Fatalf("read back % x", o.pdu)
	}
}

func TestMalformedRequests(t *testing.T) {
	d := newDevice()
	for _, c := range []struct {
		pdu  []byte
		code byte
	}{
		{[]byte{0x2b, 0, 0, 0, 1}, 1},           // unknown function
		{[]byte{3, 0, 0, 0, 126}, 3},            // too many registers
		{[]byte{5, 0, 0, 0x12, 0x34}, 3},        // coil value neither 0 nor FF00
		{[]byte{16, 0, 0, 0, 2, 4, 0, 1}, 3},    // short payload
		{[]byte{3, 0xFF, 0xFF, 0, 2}, 2},        // runs past 65535
		{[]byte{15, 0, 0, 0, 9, 2, 0xFF, 1}, 0}, // nine coils in two bytes
	} {
		o := d.handle(1, c.pdu)
		if c.code == 0 {
			if o.pdu[0] != c.pdu[0] {
				t.Errorf("% x: reply % x, want success", c.pdu, o.pdu)
			}
			continue
		}
		if len(o.pdu) != 2 || o.pdu[0] != c.pdu[0]|0x80 || o.pdu[1] != c.code {
			t.Errorf("% x: reply % x, want exception %d", c.pdu, o.pdu, c.code)
		}
	}
	if d.Value(Coils, 8) != 1 || d.Value(Coils, 7) != 1 || d.Writes(Coils, 8) != 1 {
		t.Errorf("FC15 stored coil 7 %d, coil 8 %d", d.Value(Coils, 7), d.Value(Coils, 8))
	}
}

// writeRegister1 connects to s and sends FC6 to holding register 1, value 5,
// unit 1, transaction 7; the caller closes the connection.
func writeRegister1(t *testing.T, s *TCP) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte{0, 7, 0, 0, 0, 6, 1, 6, 0, 1, 0, 5}); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c
}

// TestTCPRST checks the RST is real: the client's read fails with a reset,
// not an orderly EOF.
func TestTCPRST(t *testing.T) {
	s := StartTCP(t)
	s.Inject(Fault{Mode: ApplyRST})
	c := writeRegister1(t, s)
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 12))
	if err == nil || err == io.EOF {
		t.Fatalf("read after the fault = %v, want connection reset", err)
	}
	if s.Writes(HoldingRegisters, 1) != 1 || s.Value(HoldingRegisters, 1) != 5 {
		t.Fatal("the write was not applied before the reset")
	}
}

// TestHoldAndAwaitHandled: a held Delay reply goes out only when the test
// lets it, and the device counts the request as handled only then; a Hang is
// handled at once, though the connection stays open until the client closes it.
func TestHoldAndAwaitHandled(t *testing.T) {
	s := StartTCP(t)
	hold := make(chan struct{})
	s.Inject(Fault{Mode: Delay, Match: At(6, 1), Times: 1, Hold: hold})
	s.Inject(Fault{Mode: Hang, Match: At(6, 2), Times: 1})
	c := writeRegister1(t, s)
	defer c.Close()
	short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelShort()
	if err := s.AwaitHandled(short, 6, 1); err == nil {
		t.Fatal("handled while its reply was held")
	}
	close(hold)
	reply := make([]byte, 12)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, reply); err != nil || reply[1] != 7 || reply[7] != 6 {
		t.Fatalf("reply % x, %v; want the echo of transaction 7", reply, err)
	}

	// FC6 to holding register 2: the device hangs.
	if _, err := c.Write([]byte{0, 8, 0, 0, 0, 6, 1, 6, 0, 2, 0, 5}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.AwaitHandled(ctx, 6, 2); err != nil {
		t.Fatal(err)
	}
	if s.Writes(HoldingRegisters, 1) != 1 || s.Writes(HoldingRegisters, 2) != 0 || s.Requests(6) != 2 {
		t.Fatalf("writes %d and %d, requests %d; want 1, 0, 2", s.Writes(HoldingRegisters, 1), s.Writes(HoldingRegisters, 2), s.Requests(6))
	}
}

// TestLateApply: a held write is not applied while the device serves another
// connection (which reads the old value), and is applied when the hold ends
// though its client has closed the connection meanwhile.
func TestLateApply(t *testing.T) {
	s := StartTCP(t)
	s.Set(HoldingRegisters, 1, 3)
	hold := make(chan struct{})
	s.Inject(Fault{Mode: LateApply, Match: At(6, 1), Times: 1, Hold: hold})
	old := writeRegister1(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.AwaitRequests(ctx, 6, 1); err != nil { // the device holds it
		t.Fatal(err)
	}
	old.Close()

	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// FC3 from holding register 1, one register, transaction 8.
	if _, err := c.Write([]byte{0, 8, 0, 0, 0, 6, 1, 3, 0, 1, 0, 1}); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, 11)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, reply); err != nil || reply[1] != 8 || reply[10] != 3 {
		t.Fatalf("read while the write is held: % x, %v; want transaction 8 with the old value 3", reply, err)
	}
	if s.Writes(HoldingRegisters, 1) != 0 {
		t.Fatal("the held write was applied before the hold ended")
	}
	close(hold)
	if err := s.AwaitHandled(ctx, 6, 1); err != nil {
		t.Fatal(err)
	}
	if s.Writes(HoldingRegisters, 1) != 1 || s.Value(HoldingRegisters, 1) != 5 {
		t.Fatalf("after the hold: %d writes, value %d; want 1 and 5", s.Writes(HoldingRegisters, 1), s.Value(HoldingRegisters, 1))
	}
}

// AckLater answers exception 5 at once and applies the write only once its
// hold is closed.
func TestAckLater(t *testing.T) {
	d := newDevice()
	defer close(d.done)
	hold := make(chan struct{})
	d.Inject(Fault{Mode: AckLater, Match: At(6, 10), Times: 1, Hold: hold})
	if o := d.handle(1, []byte{6, 0, 10, 0, 7}); string(o.pdu) != string([]byte{6 | 0x80, 5}) {
		t.Fatalf("reply % x, want exception 5", o.pdu)
	}
	if d.Writes(HoldingRegisters, 10) != 0 {
		t.Fatal("applied before the hold was closed")
	}
	close(hold)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.AwaitWrites(ctx, HoldingRegisters, 10, 1); err != nil {
		t.Fatal(err)
	}
	d.later.Wait()
	if d.Value(HoldingRegisters, 10) != 7 || d.Writes(HoldingRegisters, 10) != 1 {
		t.Fatalf("value %d, %d writes; want 7 and 1", d.Value(HoldingRegisters, 10), d.Writes(HoldingRegisters, 10))
	}
}
