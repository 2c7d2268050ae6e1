package modbus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	gb "github.com/goburrow/modbus"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

// OpenTCP opens a Modbus TCP bus (drivers.Opener). It does not connect: the
// first request does, so a device that is down at start-up is reported per
// request (unreachable) instead of stopping the daemon.
func OpenTCP(_ context.Context, _ *manifest.Manifest, b *manifest.Bus) (drivers.Bus, error) {
	c := b.ModbusTCP
	if c == nil {
		return nil, fmt.Errorf("bus %q: no modbus-tcp settings", b.Name)
	}
	set, err := newSettings(c.TimeoutMs, c.Retries, c.MaxGap)
	if err != nil {
		return nil, fmt.Errorf("bus %q: %w", b.Name, err)
	}
	if _, _, err := net.SplitHostPort(c.Address); err != nil {
		return nil, fmt.Errorf("bus %q: address %q: want host:port: %w", b.Name, c.Address, err)
	}
	return newTCPBus(c.Address, set, time.Duration(c.LateWriteMs)*time.Millisecond), nil
}

// newTCPBus is a bus to addr; late is its late_write_ms, how long the reply
// to a write frame it gave up on is listened for.
func newTCPBus(addr string, set settings, late time.Duration) *Bus {
	stop := make(chan struct{})
	tr := &tcpTransport{addr: addr, stop: stop, late: late}
	// The handler is used only as the packager (MBAP header); its own
	// transporter, which reconnects silently and has no backoff, is not used.
	pk := gb.NewTCPClientHandler(addr)
	return newBus("modbus-tcp "+addr, set, pk, func(u uint8) { pk.SlaveId = u }, tr,
		func(uint8) error { return nil }, stop)
}

// tcpTransport carries MBAP frames over one TCP connection, redialling after
// failures with backoff.
type tcpTransport struct {
	addr      string
	stop      <-chan struct{}
	deadline  time.Time
	mayResend bool
	conn      net.Conn
	bo        backoff
	buf       [260]byte // the reply being read; here, not on the heap per exchange

	late      time.Duration
	mu        sync.Mutex // guards listening: its connections end on their own goroutines
	listening []net.Conn // oldest first
}

// MaxListening is how many connections a TCP bus keeps listening for late
// replies at most. A device takes few connections (a gateway often four, a
// small device one or two), and each one listening holds a place until
// late_write_ms has passed: before a new connection is made, the oldest
// listening ones are closed, so that the bus never holds more than
// MaxListening connections to the device, the new one included. A write
// whose listening is cut short loses its proof and never gains one: its
// settle window is waited out.
const MaxListening = 2

// errStale marks a failure that suggests the connection was already dead
// before the request reached the peer (it closed an idle connection or
// restarted). For a write it proves nothing: the peer may have applied it and
// then closed.
var errStale = errors.New("connection closed by peer")

func (t *tcpTransport) prepare(d time.Time, mayResend bool) { t.deadline, t.mayResend = d, mayResend }

func (t *tcpTransport) fault() { t.drop() }

func (t *tcpTransport) close() error {
	t.drop()
	t.stopListening()
	return nil
}

// stopListening gives up the late replies still listened for.
func (t *tcpTransport) stopListening() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.listening {
		_ = c.Close()
	}
	t.listening = nil
}

// makeRoom gives up the oldest late replies listened for until fewer than
// MaxListening connections listen, before a new connection is made.
func (t *tcpTransport) makeRoom() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.listening) >= MaxListening {
		_ = t.listening[0].Close()
		t.listening = slices.Delete(t.listening, 0, 1)
	}
}

func (t *tcpTransport) drop() {
	if t.conn != nil {
		_ = t.conn.Close()
		t.conn = nil
	}
}

// Send implements gb.Transporter.
func (t *tcpTransport) Send(adu []byte) ([]byte, error) {
	// A peer that closed the idle connection is noticed before sending, so
	// that an ordinary write does not end in doubt. A read skips the check
	// (a syscall): it finds out by sending, and is resent below.
	if t.conn != nil && !t.mayResend && !peerOpen(t.conn) {
		t.drop()
	}
	reused := t.conn != nil
	resp, err := t.try(adu)
	if reused && t.mayResend && errors.Is(err, errStale) {
		// For a read, one fresh connection after the peer closed this one
		// is a reconnect, not a retry. Never for a write: the peer may have
		// applied it before closing.
		resp, err = t.try(adu)
	}
	return resp, err
}

func (t *tcpTransport) try(adu []byte) ([]byte, error) {
	fresh := t.conn == nil
	if err := t.connect(); err != nil {
		return nil, notSent(err)
	}
	if err := t.conn.SetDeadline(t.deadline); err != nil {
		t.drop()
		return nil, notSent(fmt.Errorf("%w: %w", drivers.ErrUnreachable, err))
	}
	if n, err := t.conn.Write(adu); err != nil {
		t.drop()
		err = t.closedAtOnce(fresh, t.ioError(err, true))
		if n == 0 {
			return nil, notSent(err)
		}
		return nil, err
	}
	const header = 7
	buf := t.buf[:]
	if got, err := io.ReadFull(t.conn, buf[:header]); err != nil {
		return nil, t.noReply(adu, buf[:got], t.closedAtOnce(fresh && got == 0, t.ioError(err, true)))
	}
	// The length field counts the unit id and the PDU.
	n := int(buf[4])<<8 | int(buf[5])
	if n < 2 || header-1+n > len(buf) {
		t.drop()
		return nil, fmt.Errorf("reply header has length %d, want 2..%d", n, len(buf)-header+1)
	}
	if got, err := io.ReadFull(t.conn, buf[header:header-1+n]); err != nil {
		return nil, t.noReply(adu, buf[:header+got], t.ioError(err, false))
	}
	return append([]byte(nil), buf[:header-1+n]...), nil
}

// noReply ends an exchange whose reply (got so far) did not come in full,
// for err. The connection is dropped; but when a write's deadline passed
// first, it is left open for the bus's late_write_ms to hear the reply out:
// a device or gateway that applies the frame late still answers it there,
// and that echo proves the write applied (drivers.LateReply). Nothing else
// is sent on the connection meanwhile, and at most MaxListening listen
// (makeRoom).
func (t *tcpTransport) noReply(adu, got []byte, err error) error {
	if t.mayResend || t.late <= 0 || !errors.Is(err, drivers.ErrTimeout) {
		t.drop()
		return err
	}
	conn, lr := t.conn, drivers.NewLateReply(err)
	t.conn = nil
	t.mu.Lock()
	t.listening = append(t.listening, conn)
	t.mu.Unlock()
	adu, got, until := slices.Clone(adu), slices.Clone(got), time.Now().Add(t.late)
	go func() {
		echo := awaitEcho(conn, adu, got, until)
		t.mu.Lock()
		t.listening = slices.DeleteFunc(t.listening, func(c net.Conn) bool { return c == conn })
		t.mu.Unlock()
		_ = conn.Close()
		lr.End(echo)
	}()
	return lr
}

// awaitEcho reads on c, until `until`, the rest of the reply to the write
// request adu of which got has arrived, and reports whether it echoes the
// request: its transaction and unit, and the request's function code,
// address and value or count, which are the first five bytes of the PDU of
// FC5, 6, 15 and 16 alike. An exception reply proves nothing: a gateway
// answers 11 (target failed to respond) when the device's reply was lost,
// applied or not. Nor does the connection closing first.
func awaitEcho(c net.Conn, adu, got []byte, until time.Time) bool {
	const header, echo = 7, 5
	if len(adu) < header+echo || c.SetReadDeadline(until) != nil {
		return false
	}
	buf := make([]byte, header+echo)
	n := copy(buf, got)
	if n < header {
		if _, err := io.ReadFull(c, buf[n:header]); err != nil {
			return false
		}
		n = header
	}
	// The length counts the unit id and the PDU.
	if buf[4] != 0 || buf[5] != 1+echo {
		return false
	}
	if _, err := io.ReadFull(c, buf[n:]); err != nil {
		return false
	}
	return bytes.Equal(buf[:4], adu[:4]) && buf[6] == adu[6] && bytes.Equal(buf[header:], adu[header:header+echo])
}

// closedAtOnce gives up listening for late replies when the device closed
// a fresh connection before answering on it (err): a device that takes a
// few connections may accept one more and close it at once rather than
// refuse it, and the connections kept listening hold its places.
func (t *tcpTransport) closedAtOnce(fresh bool, err error) error {
	if fresh && errors.Is(err, errStale) {
		t.stopListening()
	}
	return err
}

func (t *tcpTransport) connect() error {
	if t.conn != nil {
		return nil
	}
	if err := t.bo.wait(time.Now(), t.deadline, t.stop); err != nil {
		return err
	}
	t.makeRoom()
	d := net.Dialer{Deadline: t.deadline}
	conn, err := d.Dial("tcp", t.addr)
	if err != nil {
		// A device that takes one connection at a time may refuse this one
		// while a late reply is listened for on another: that gives way.
		t.stopListening()
		t.bo.failed(time.Now(), err)
		if isTimeout(err) {
			return fmt.Errorf("%w: connecting: %w", drivers.ErrTimeout, err)
		}
		return fmt.Errorf("%w: %w", drivers.ErrUnreachable, err)
	}
	t.bo.succeeded()
	t.conn = conn
	return nil
}

// ioError classifies a read or write failure. beforeReply says no byte of the
// reply had arrived, so a closed connection means the peer never saw the request.
func (t *tcpTransport) ioError(err error, beforeReply bool) error {
	switch {
	case isTimeout(err):
		return fmt.Errorf("%w: no complete reply before the deadline: %w", drivers.ErrTimeout, err)
	case beforeReply && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)):
		return fmt.Errorf("%w: %w: %w", drivers.ErrUnreachable, errStale, err)
	}
	return fmt.Errorf("%w: %w", drivers.ErrUnreachable, err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
