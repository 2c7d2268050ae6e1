package modbus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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
	return newTCPBus(c.Address, set), nil
}

func newTCPBus(addr string, set settings) *Bus {
	stop := make(chan struct{})
	tr := &tcpTransport{addr: addr, stop: stop}
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
}

// errStale marks a failure that suggests the connection was already dead
// before the request reached the peer (it closed an idle connection or
// restarted). For a write it proves nothing: the peer may have applied it and
// then closed.
var errStale = errors.New("connection closed by peer")

func (t *tcpTransport) prepare(d time.Time, mayResend bool) { t.deadline, t.mayResend = d, mayResend }

func (t *tcpTransport) fault() { t.drop() }

func (t *tcpTransport) close() error {
	t.drop()
	return nil
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
	if err := t.connect(); err != nil {
		return nil, notSent(err)
	}
	if err := t.conn.SetDeadline(t.deadline); err != nil {
		t.drop()
		return nil, notSent(fmt.Errorf("%w: %w", drivers.ErrUnreachable, err))
	}
	if n, err := t.conn.Write(adu); err != nil {
		t.drop()
		if n == 0 {
			return nil, notSent(t.ioError(err, true))
		}
		return nil, t.ioError(err, true)
	}
	const header = 7
	buf := t.buf[:]
	if _, err := io.ReadFull(t.conn, buf[:header]); err != nil {
		t.drop()
		return nil, t.ioError(err, true)
	}
	// The length field counts the unit id and the PDU.
	n := int(buf[4])<<8 | int(buf[5])
	if n < 2 || header-1+n > len(buf) {
		t.drop()
		return nil, fmt.Errorf("reply header has length %d, want 2..%d", n, len(buf)-header+1)
	}
	if _, err := io.ReadFull(t.conn, buf[header:header-1+n]); err != nil {
		t.drop()
		return nil, t.ioError(err, false)
	}
	return append([]byte(nil), buf[:header-1+n]...), nil
}

func (t *tcpTransport) connect() error {
	if t.conn != nil {
		return nil
	}
	if err := t.bo.wait(time.Now(), t.deadline, t.stop); err != nil {
		return err
	}
	d := net.Dialer{Deadline: t.deadline}
	conn, err := d.Dial("tcp", t.addr)
	if err != nil {
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
