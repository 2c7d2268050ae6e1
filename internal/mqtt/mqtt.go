// Package mqtt publishes messages to an MQTT 3.1.1 broker at QoS 0 or 1: the
// audit trail's remote sink and the telemetry publisher both use it.
//
// It speaks only what publishing needs (CONNECT, PUBLISH, PUBACK,
// DISCONNECT) rather than link a client library that brings websockets,
// x/net and x/text with it: half a megabyte of the armv6 binary's 12 MB
// budget. It connects on demand with a clean session and no keep-alive (the
// broker then never drops it for being idle); a caller whose Publish failed
// publishes again, on a new connection.
package mqtt

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"time"
)

// Options configure a Client.
type Options struct {
	// Addr is the broker's host:port.
	Addr string
	// TLS is the configuration for mqtts; nil connects in clear.
	TLS *tls.Config
	// User carries the user name and, if set, the password.
	User     *url.Userinfo
	ClientID string
	// QoS is 0 (at most once) or 1 (at least once: Publish returns when the
	// broker has acknowledged every message).
	QoS byte
	// Timeout bounds one connection attempt or one Publish (10 s if 0).
	Timeout time.Duration
}

// Message is one PUBLISH.
type Message struct {
	Topic   string
	Payload []byte
	// Retain asks the broker to keep the message as the topic's last, for
	// subscribers that come later.
	Retain bool
}

// Client publishes to one broker; it is not safe for concurrent use.
type Client struct {
	o Options

	conn   net.Conn
	r      *bufio.Reader
	nextID uint16
}

// New returns a client; it connects on the first Publish.
func New(o Options) *Client {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	return &Client{o: o}
}

// DefaultClientID is a client id unique to this process on this host:
// brokers drop a connection when another one uses its id.
func DefaultClientID(role string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("physmcpd-%s-%s-%d", role, host, os.Getpid())
}

const (
	mqttConnect    = 0x10
	mqttConnAck    = 0x20
	mqttPublish    = 0x30
	mqttQoS1       = 0x02 // PUBLISH flag bits
	mqttRetain     = 0x01
	mqttPubAck     = 0x40
	mqttDisconnect = 0xE0
)

// Publish sends msgs in order and, at QoS 1, waits for the broker to
// acknowledge each. On an error the connection is dropped; which messages
// arrived is unknown.
func (c *Client) Publish(ctx context.Context, msgs []Message) error {
	deadline := time.Now().Add(c.o.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := c.publish(ctx, deadline, msgs); err != nil {
		c.drop()
		return fmt.Errorf("mqtt %s: %w", c.o.Addr, err)
	}
	return nil
}

func (c *Client) publish(ctx context.Context, deadline time.Time, msgs []Message) error {
	if c.conn != nil && !c.alive() {
		c.drop()
	}
	if c.conn == nil {
		if err := c.connect(ctx, deadline); err != nil {
			return err
		}
	}
	if err := c.conn.SetDeadline(deadline); err != nil {
		return err
	}
	conn := c.conn
	defer context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })() // cancelled: stop waiting now
	var ids []uint16
	w := bufio.NewWriter(c.conn)
	for _, m := range msgs {
		kind := byte(mqttPublish)
		if m.Retain {
			kind |= mqttRetain
		}
		body := mqttString(nil, m.Topic)
		if c.o.QoS == 1 {
			kind |= mqttQoS1
			c.nextID++
			if c.nextID == 0 { // 0 is not a packet identifier
				c.nextID = 1
			}
			ids = append(ids, c.nextID)
			body = binary.BigEndian.AppendUint16(body, c.nextID)
		}
		writePacket(w, kind, append(body, m.Payload...))
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	// A broker sends PUBACKs in the order it received the PUBLISHes [MQTT-4.6.0-2].
	for _, id := range ids {
		kind, body, err := readPacket(c.r)
		if err != nil {
			return fmt.Errorf("waiting for the acknowledgement of message %d: %w", id, err)
		}
		if kind&0xF0 != mqttPubAck || len(body) != 2 || binary.BigEndian.Uint16(body) != id {
			return fmt.Errorf("broker answered packet type %#x % x, want the acknowledgement of message %d", kind, body, id)
		}
	}
	return nil
}

// alive reports whether an idle connection is still open. The broker sends
// nothing unasked on it, so anything readable is its end (EOF, a reset):
// found now, before publishing, rather than by a QoS 0 message written into
// a connection the broker has already closed.
func (c *Client) alive() bool {
	// A deadline already past would fail the read before it looks.
	if c.conn.SetReadDeadline(time.Now().Add(time.Millisecond)) != nil {
		return false
	}
	_, err := c.r.Peek(1)
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (c *Client) connect(ctx context.Context, deadline time.Time) error {
	d := net.Dialer{Deadline: deadline}
	conn, err := d.DialContext(ctx, "tcp", c.o.Addr)
	if err != nil {
		return err
	}
	if c.o.TLS != nil {
		tc := tls.Client(conn, c.o.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return err
		}
		conn = tc
	}
	if err := conn.SetDeadline(deadline); err != nil {
		conn.Close()
		return err
	}
	// Variable header: protocol "MQTT" level 4 (3.1.1), flags, keep-alive 0.
	flags := byte(0x02) // clean session
	payload := mqttString(nil, c.o.ClientID)
	if u := c.o.User; u != nil {
		flags |= 0x80
		payload = mqttString(payload, u.Username())
		if p, ok := u.Password(); ok {
			flags |= 0x40
			payload = mqttString(payload, p)
		}
	}
	body := append(mqttString(nil, "MQTT"), 4, flags, 0, 0)
	w := bufio.NewWriter(conn)
	writePacket(w, mqttConnect, append(body, payload...))
	r := bufio.NewReader(conn)
	if err := w.Flush(); err != nil {
		conn.Close()
		return fmt.Errorf("connect: %w", err)
	}
	kind, ack, err := readPacket(r)
	switch {
	case err != nil:
		err = fmt.Errorf("connect: %w", err)
	case kind&0xF0 != mqttConnAck || len(ack) != 2:
		err = fmt.Errorf("connect: broker answered packet type %#x", kind)
	case ack[1] != 0:
		err = fmt.Errorf("connect: broker refused the connection (return code %d)", ack[1])
	}
	if err != nil {
		conn.Close()
		return err
	}
	c.conn, c.r = conn, r
	return nil
}

// mqttString appends s as an MQTT UTF-8 string (two-byte length first).
func mqttString(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint16(b, uint16(len(s))), s...)
}

// writePacket writes a fixed header (kind, remaining length) and body.
func writePacket(w *bufio.Writer, kind byte, body []byte) {
	w.WriteByte(kind)
	for n := len(body); ; {
		b := byte(n % 128)
		if n /= 128; n > 0 {
			b |= 0x80
		}
		w.WriteByte(b)
		if n == 0 {
			break
		}
	}
	w.Write(body)
}

// readPacket reads one packet: its first byte and its body.
func readPacket(r *bufio.Reader) (kind byte, body []byte, err error) {
	if kind, err = r.ReadByte(); err != nil {
		return 0, nil, err
	}
	n, mul := 0, 1
	for i := 0; ; i++ {
		b, err := r.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		n += int(b&0x7F) * mul
		if b&0x80 == 0 {
			break
		}
		if mul *= 128; i == 3 {
			return 0, nil, errors.New("malformed remaining length")
		}
	}
	body = make([]byte, n)
	_, err = io.ReadFull(r, body)
	return kind, body, err
}

func (c *Client) drop() {
	if c.conn != nil {
		c.conn.Write([]byte{mqttDisconnect, 0})
		c.conn.Close()
		c.conn, c.r = nil, nil
	}
}

// Close disconnects.
func (c *Client) Close() error {
	c.drop()
	return nil
}
