// Package telemetry publishes the device's readings outside MCP (manifest
// telemetry.mqtt): every read capability's reading, as read_* answers it, to
// an MQTT topic of its own when it changes. It follows the engine's change
// feed (engine.Watch), which paces itself by each capability's deadband and
// min_update_interval_ms, and never waits for the broker: readings that
// cannot go yet wait in a queue that keeps the latest of each capability.
package telemetry

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/mqtt"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// Caller is who the engine sees watching: the device's own publisher,
// configured by whoever wrote the manifest, so it may read every capability.
var Caller = engine.Caller{Identity: "telemetry", Role: manifest.RoleAdmin}

// Publisher publishes readings until Close.
type Publisher struct {
	log     *slog.Logger
	q       *queue
	watches []*engine.Watch
	wg      sync.WaitGroup
}

// Options are the MQTT client's settings from the manifest, resolved (files
// read); Client builds them.
func Options(m *manifest.Manifest) (mqtt.Options, error) {
	cfg := m.Telemetry.MQTT
	u, err := cfg.BrokerURL()
	if err != nil {
		return mqtt.Options{}, fmt.Errorf("telemetry.mqtt.broker: %w", err)
	}
	o := mqtt.Options{Addr: u.Host, User: u.User, ClientID: cfg.ClientID, QoS: cfg.QoSLevel()}
	if o.ClientID == "" {
		o.ClientID = mqtt.DefaultClientID("telemetry")
	}
	if cfg.PasswordFile != "" {
		data, err := os.ReadFile(m.Path(cfg.PasswordFile))
		if err != nil {
			return mqtt.Options{}, fmt.Errorf("telemetry.mqtt.password_file: %w", err)
		}
		o.User = url.UserPassword(u.User.Username(), string(bytes.TrimRight(data, "\r\n")))
	}
	if u.Scheme == "mqtts" {
		o.TLS = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
		if cfg.CAFile != "" {
			data, err := os.ReadFile(m.Path(cfg.CAFile))
			if err != nil {
				return mqtt.Options{}, fmt.Errorf("telemetry.mqtt.ca_file: %w", err)
			}
			o.TLS.RootCAs = x509.NewCertPool()
			if !o.TLS.RootCAs.AppendCertsFromPEM(data) {
				return mqtt.Options{}, fmt.Errorf("telemetry.mqtt.ca_file %s: no PEM certificate in it", m.Path(cfg.CAFile))
			}
		}
	}
	return o, nil
}

// Start publishes e's readings as m.Telemetry says; nil when m has no
// telemetry section.
func Start(e *engine.Engine, m *manifest.Manifest, logger *slog.Logger) (*Publisher, error) {
	if m.Telemetry == nil || m.Telemetry.MQTT == nil {
		return nil, nil
	}
	o, err := Options(m)
	if err != nil {
		return nil, err
	}
	cfg := m.Telemetry.MQTT
	p := &Publisher{log: logger, q: newQueue(mqtt.New(o), logger)}
	for _, c := range m.Capabilities {
		if c.Kind != manifest.KindRead {
			continue
		}
		w, err := e.Watch(context.Background(), Caller, c.ToolName(),
			engine.WatchOptions{Deadband: c.ChangeDeadband(), MinInterval: c.MinUpdateInterval()})
		if errors.Is(err, engine.ErrNotPermitted) {
			// A permission rule without admin, or a time window closed
			// now: the policy keeps this reading from callers like us.
			logger.Warn("telemetry: not publishing "+c.ToolName()+": the policy does not let role admin read it", "err", err)
			continue
		}
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("telemetry: watching %s: %w", c.ToolName(), err)
		}
		p.watches = append(p.watches, w)
		topic, retain := cfg.Topic(m, c.Name), cfg.Retained()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.offer(topic, retain, w.First)
			for r := range w.Updates {
				p.offer(topic, retain, r)
			}
		}()
	}
	logger.Info("telemetry: publishing readings", "broker", o.Addr, "topic", cfg.Topic(m, "+"), "qos", o.QoS, "retain", cfg.Retained())
	return p, nil
}

func (p *Publisher) offer(topic string, retain bool, r promcp.ReadResponse) {
	payload, err := json.Marshal(r)
	if err != nil { // a value JSON cannot carry (NaN, ±Inf)
		p.log.Warn("telemetry: reading not published", "topic", topic, "err", err)
		return
	}
	p.q.Offer(mqtt.Message{Topic: topic, Payload: payload, Retain: retain})
}

// Close stops watching and publishing.
func (p *Publisher) Close() error {
	if p == nil {
		return nil
	}
	for _, w := range p.watches {
		w.Stop()
	}
	p.wg.Wait()
	return p.q.close()
}
