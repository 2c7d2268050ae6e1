package modbusfault

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
)

// TCP is a Modbus TCP device on a loopback port. It answers every unit id.
type TCP struct {
	*Device
	ln    net.Listener
	once  sync.Once
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[*net.TCPConn]bool
	peak  int // the most connections open at once (PeakConns)
}

// StartTCP listens on 127.0.0.1 and serves until the test ends.
func StartTCP(tb testing.TB) *TCP {
	tb.Helper()
	s, err := ListenTCP()
	if err != nil {
		tb.Fatalf("modbusfault: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

// ListenTCP listens on 127.0.0.1 and serves until Close (for bench/).
func ListenTCP() (*TCP, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &TCP{Device: newDevice(), ln: ln, conns: map[*net.TCPConn]bool{}}
	s.wg.Go(s.accept)
	return s, nil
}

// Addr is the host:port to connect to.
func (s *TCP) Addr() string { return s.ln.Addr().String() }

// PeakConns is the most connections that were open at once, counted as each
// is accepted: those the server has not closed and (on Linux) the client
// has not closed either, as a device with few connection places counts
// them. A connection the server still serves (a held request) but whose
// client has closed it no longer holds a place.
func (s *TCP) PeakConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// Close stops the server and closes its connections.
func (s *TCP) Close() {
	s.once.Do(func() {
		s.mu.Lock()
		close(s.done)
		s.mu.Unlock()
		s.ln.Close()
		s.CloseConns(false)
		s.wg.Wait()
		s.later.Wait()
	})
}

// CloseConns closes every open connection, with a FIN, or a RST when rst is
// set: what a device does to connections it finds idle too long.
func (s *TCP) CloseConns(rst bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if rst {
			_ = c.SetLinger(0)
		}
		c.Close()
	}
}

func (s *TCP) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		tc := c.(*net.TCPConn)
		s.mu.Lock()
		select {
		case <-s.done: // accepted while closing: CloseConns may have run
			s.mu.Unlock()
			tc.Close()
			return
		default:
		}
		s.conns[tc] = true
		open := 0
		for c := range s.conns {
			if clientOpen(c) {
				open++
			}
		}
		s.peak = max(s.peak, open)
		s.mu.Unlock()
		s.wg.Go(func() {
			s.serve(tc)
			s.mu.Lock()
			delete(s.conns, tc)
			s.mu.Unlock()
			tc.Close()
		})
	}
}

// serve answers the requests on one connection until it closes or a fault
// ends it.
func (s *TCP) serve(c *net.TCPConn) {
	var hdr [7]byte // transaction id, protocol id, length, unit id
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(hdr[4:]))
		if n < 2 || n > 254 {
			return
		}
		pdu := make([]byte, n-1)
		if _, err := io.ReadFull(c, pdu); err != nil {
			return
		}
		more, drain := s.respond(c, hdr, s.handle(hdr[6], pdu))
		s.finished(pdu[0])
		if drain {
			_, _ = io.Copy(io.Discard, c)
		}
		if !more {
			return
		}
	}
}

// respond acts out o on c. more says the connection goes on serving; drain,
// that it only hears the client out until the client closes it.
func (s *TCP) respond(c *net.TCPConn, hdr [7]byte, o outcome) (more, drain bool) {
	switch o.mode {
	case ApplyNoReply:
		return true, false
	case ApplyDrop:
		c.Close()
		return false, false
	case ApplyRST:
		_ = c.SetLinger(0)
		c.Close()
		return false, false
	case ApplyFIN:
		_ = c.CloseWrite()
		return false, true
	case Hang:
		return false, true
	}
	if !s.hold(&o) {
		return false, false
	}
	frame := append(hdr[:4:4], 0, 0, hdr[6])
	binary.BigEndian.PutUint16(frame[4:], uint16(len(o.pdu)+1))
	frame = append(frame, o.pdu...)
	if o.mode == Garble {
		frame[3] ^= 0x5A // the protocol id must be 0
	}
	_, err := c.Write(frame)
	return err == nil, false
}
