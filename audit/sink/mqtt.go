package sink

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
	"strings"
	"time"
)

// mqttSender publishes each line as one QoS 1 message (MQTT 3.1.1) and counts
// a batch shipped when the broker has acknowledged every line of it (PUBACK).
// It speaks only what that needs (CONNECT, PUBLISH at QoS 1, PUBACK,
// DISCONNECT) rather than link a client library that brings websockets,
// x/net and x/text with it: half a megabyte of the armv6 binary's 12 MB
// budget. It connects on demand with a clean session and no keep-alive
// (the broker then never drops it for being idle); what a lost connection
// left unacknowledged is sent again from the trail.
type mqttSender struct {
	addr     string
	tls      *tls.Config // nil for mqtt://
	topic    string
	user     *url.Userinfo
	clientID string

	conn   net.Conn
	r      *bufio.Reader
	nextID uint16
}

const (
	mqttConnect    = 0x10
	mqttConnAck    = 0x20
	mqttPublishQoS = 0x32 // PUBLISH, QoS 1
	mqttPubAck     = 0x40
	mqttDisconnect = 0xE0
)

func newMQTT(u *url.URL) *mqttSender {
	host, _ := os.Hostname()
	s := &mqttSender{addr: u.Host, topic: strings.TrimPrefix(u.Path, "/"), user: u.User,
		clientID: fmt.Sprintf("physmcpd-audit-%s-%d", host, os.Getpid())}
	if u.Scheme == "mqtts" {
		s.tls = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
	}
	return s
}

func (s *mqttSender) Send(ctx context.Context, lines [][]byte) error {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := s.send(ctx, deadline, lines); err != nil {
		s.drop()
		return fmt.Errorf("mqtt %s: %w", s.addr, err)
	}
	return nil
}

func (s *mqttSender) send(ctx context.Context, deadline time.Time, lines [][]byte) error {
	if s.conn == nil {
		if err := s.connect(ctx, deadline); err != nil {
			return err
		}
	}
	if err := s.conn.SetDeadline(deadline); err != nil {
		return err
	}
	// Publish the batch, then read its acknowledgements: a broker sends
	// PUBACKs in the order it received the PUBLISHes [MQTT-4.6.0-2].
	ids := make([]uint16, len(lines))
	w := bufio.NewWriter(s.conn)
	for i, line := range lines {
		s.nextID++
		if s.nextID == 0 { // 0 is not a packet identifier
			s.nextID = 1
		}
		ids[i] = s.nextID
		body := binary.BigEndian.AppendUint16(mqttString(nil, s.topic), ids[i])
		writePacket(w, mqttPublishQoS, append(body, line...))
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	for _, id := range ids {
		kind, body, err := readPacket(s.r)
		if err != nil {
			return fmt.Errorf("waiting for the acknowledgement of message %d: %w", id, err)
		}
		if kind&0xF0 != mqttPubAck || len(body) != 2 || binary.BigEndian.Uint16(body) != id {
			return fmt.Errorf("broker answered packet type %#x % x, want the acknowledgement of message %d", kind, body, id)
		}
	}
	return nil
}

func (s *mqttSender) connect(ctx context.Context, deadline time.Time) error {
	d := net.Dialer{Deadline: deadline}
	conn, err := d.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return err
	}
	if s.tls != nil {
		tc := tls.Client(conn, s.tls)
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
	payload := mqttString(nil, s.clientID)
	if s.user != nil {
		flags |= 0x80
		payload = mqttString(payload, s.user.Username())
		if p, ok := s.user.Password(); ok {
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
	s.conn, s.r = conn, r
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

func (s *mqttSender) drop() {
	if s.conn != nil {
		s.conn.Write([]byte{mqttDisconnect, 0})
		s.conn.Close()
		s.conn, s.r = nil, nil
	}
}

func (s *mqttSender) Close() error {
	s.drop()
	return nil
}
