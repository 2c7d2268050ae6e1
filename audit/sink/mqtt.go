package sink

import (
	"context"
	"crypto/tls"
	"net/url"
	"strings"

	"github.com/physmcp/physmcpd/internal/mqtt"
)

// mqttSender publishes each line as one QoS 1 message and counts a batch
// shipped when the broker has acknowledged every line of it; what a lost
// connection left unacknowledged is sent again from the trail.
type mqttSender struct {
	c     *mqtt.Client
	topic string
}

func newMQTT(u *url.URL) *mqttSender {
	o := mqtt.Options{Addr: u.Host, User: u.User, ClientID: mqtt.DefaultClientID("audit"), QoS: 1, Timeout: timeout}
	if u.Scheme == "mqtts" {
		o.TLS = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
	}
	return &mqttSender{c: mqtt.New(o), topic: strings.TrimPrefix(u.Path, "/")}
}

func (s *mqttSender) Send(ctx context.Context, lines [][]byte) error {
	msgs := make([]mqtt.Message, len(lines))
	for i, line := range lines {
		msgs[i] = mqtt.Message{Topic: s.topic, Payload: line}
	}
	return s.c.Publish(ctx, msgs)
}

func (s *mqttSender) Close() error { return s.c.Close() }
