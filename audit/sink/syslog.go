package sink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// syslogPri is facility log audit (13) at severity informational (6).
const syslogPri = 13*8 + 6

// syslogSender writes RFC 5424 messages over TCP (octet-counted, RFC 6587)
// or UDP. TCP's acknowledgement is all syslog has: a line written just
// before the receiver dies can be lost, and over UDP any line can be.
type syslogSender struct {
	network, addr string
	host, procID  string
	conn          net.Conn
}

func newSyslog(u *url.URL) *syslogSender {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "-"
	}
	return &syslogSender{
		network: strings.TrimPrefix(u.Scheme, "syslog+"),
		addr:    u.Host,
		host:    strings.Map(printable, host),
		procID:  strconv.Itoa(os.Getpid()),
	}
}

// printable maps what RFC 5424 does not allow in a header field to '_'.
func printable(r rune) rune {
	if r <= ' ' || r > '~' {
		return '_'
	}
	return r
}

func (s *syslogSender) Send(ctx context.Context, lines [][]byte) error {
	if s.conn != nil && s.network == "tcp" && peerClosed(s.conn) {
		s.drop()
	}
	if s.conn == nil {
		d := net.Dialer{Timeout: timeout}
		c, err := d.DialContext(ctx, s.network, s.addr)
		if err != nil {
			return err
		}
		s.conn = c
	}
	if err := s.conn.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		s.drop()
		return err
	}
	for _, line := range lines {
		if _, err := s.conn.Write(s.frame(line, time.Now())); err != nil {
			s.drop()
			return err
		}
	}
	return nil
}

// frame is one RFC 5424 message (the line as its UTF-8 MSG), octet-counted
// over TCP.
func (s *syslogSender) frame(line []byte, now time.Time) []byte {
	msg := fmt.Appendf(nil, "<%d>1 %s %s physmcpd %s audit - \ufeff%s", syslogPri, now.UTC().Format("2006-01-02T15:04:05.000000Z07:00"), s.host, s.procID, line)
	if s.network == "tcp" {
		return append(fmt.Appendf(nil, "%d ", len(msg)), msg...)
	}
	return msg
}

// peerClosed says whether the receiver closed the connection (a syslog
// receiver never writes, so anything but a timeout on a read means gone):
// a write to a closed connection can still succeed once and lose its line.
func peerClosed(c net.Conn) bool {
	if err := c.SetReadDeadline(time.Now().Add(time.Millisecond)); err != nil {
		return true
	}
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func (s *syslogSender) drop() {
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
}

func (s *syslogSender) Close() error {
	s.drop()
	return nil
}
