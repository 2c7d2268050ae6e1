package sink

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// mqttSender publishes each line as one QoS 1 message; the broker's PUBACK
// acknowledges it. It connects on demand with a clean session: what a lost
// connection left unacknowledged is sent again from the trail.
type mqttSender struct {
	opts   *mqtt.ClientOptions
	topic  string
	client mqtt.Client
}

func newMQTT(u *url.URL) *mqttSender {
	scheme := map[string]string{"mqtt": "tcp", "mqtts": "ssl"}[u.Scheme]
	host, _ := os.Hostname()
	opts := mqtt.NewClientOptions().
		AddBroker(scheme + "://" + u.Host).
		SetClientID(fmt.Sprintf("physmcpd-audit-%s-%d", host, os.Getpid())).
		SetCleanSession(true).
		SetAutoReconnect(false).
		SetConnectTimeout(timeout).
		SetWriteTimeout(timeout)
	if u.User != nil {
		opts.SetUsername(u.User.Username())
		if p, ok := u.User.Password(); ok {
			opts.SetPassword(p)
		}
	}
	return &mqttSender{opts: opts, topic: strings.TrimPrefix(u.Path, "/")}
}

func (s *mqttSender) Send(ctx context.Context, lines [][]byte) error {
	if s.client == nil || !s.client.IsConnectionOpen() {
		s.drop()
		c := mqtt.NewClient(s.opts)
		if err := wait(ctx, c.Connect()); err != nil {
			return fmt.Errorf("mqtt connect: %w", err)
		}
		s.client = c
	}
	// one connection keeps the order; waiting per batch, not per line,
	// saves a round trip per line
	tokens := make([]mqtt.Token, len(lines))
	for i, line := range lines {
		tokens[i] = s.client.Publish(s.topic, 1, false, line)
	}
	for _, t := range tokens {
		if err := wait(ctx, t); err != nil {
			s.drop()
			return fmt.Errorf("mqtt publish: %w", err)
		}
	}
	return nil
}

// wait waits for t within timeout.
func wait(ctx context.Context, t mqtt.Token) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case <-t.Done():
		return t.Error()
	case <-ctx.Done():
		return errors.Join(ctx.Err(), t.Error())
	}
}

func (s *mqttSender) drop() {
	if s.client != nil {
		s.client.Disconnect(0)
		s.client = nil
	}
}

func (s *mqttSender) Close() error {
	s.drop()
	return nil
}
