package manifest

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
)

// Telemetry configures readings published outside MCP.
type Telemetry struct {
	MQTT *TelemetryMQTT `yaml:"mqtt,required"`

	At Positions `yaml:"-"`
}

// TelemetryMQTT publishes every read capability's reading to an MQTT broker
// when it changes (by the capability's deadband and min_update_interval_ms).
type TelemetryMQTT struct {
	// Broker is mqtt://[USER@]HOST[:PORT] or mqtts://…; no password in it.
	Broker string `yaml:"broker,required"`
	// TopicPrefix: each reading goes to TopicPrefix/<capability name>.
	TopicPrefix string `yaml:"topic_prefix"`
	ClientID    string `yaml:"client_id"`
	QoS         *int   `yaml:"qos"`
	Retain      *bool  `yaml:"retain"`
	// PasswordFile holds the broker password (relative to the manifest).
	PasswordFile string `yaml:"password_file"`
	// CAFile is the CA (PEM) an mqtts broker's certificate must chain to,
	// instead of the system's roots (relative to the manifest).
	CAFile string `yaml:"ca_file"`

	At Positions `yaml:"-"`
}

// DefaultTelemetryQoS is qos when the manifest gives none: at least once,
// so a reading lost with a connection is sent again.
const DefaultTelemetryQoS = 1

// QoSLevel is qos with its default.
func (t *TelemetryMQTT) QoSLevel() byte {
	if t.QoS == nil {
		return DefaultTelemetryQoS
	}
	return byte(*t.QoS)
}

// Retained is retain with its default (true: a new subscriber gets the
// latest reading at once).
func (t *TelemetryMQTT) Retained() bool { return t.Retain == nil || *t.Retain }

// Topic is the topic of a capability's readings.
func (t *TelemetryMQTT) Topic(m *Manifest, capability string) string {
	prefix := t.TopicPrefix
	if prefix == "" {
		prefix = "physmcp/" + m.Device.ID
	}
	return strings.TrimSuffix(prefix, "/") + "/" + capability
}

// BrokerURL parses broker, with the scheme's port when it has none. The
// error names what is wrong, not where (validate adds the position).
func (t *TelemetryMQTT) BrokerURL() (*url.URL, error) {
	u, err := url.Parse(t.Broker)
	if err != nil {
		return nil, fmt.Errorf("broker is not a URL: %v", err)
	}
	port, ok := sinkSchemes["mqtt"][u.Scheme]
	if !ok {
		return nil, fmt.Errorf("broker %q: the scheme is mqtt or mqtts", t.Broker)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("broker %q names no host", t.Broker)
	}
	if strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
		return nil, fmt.Errorf("broker %q: the address is mqtt[s]://[USER@]HOST[:PORT]; topics come from topic_prefix", t.Broker)
	}
	if _, ok := u.User.Password(); ok {
		return nil, fmt.Errorf("broker %q holds a password: put it in password_file, which can be kept unreadable to others", u.Redacted())
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), port)
	}
	return u, nil
}

// Path resolves a file named in the manifest: relative to the manifest's directory.
func (m *Manifest) Path(name string) string {
	if name == "" || filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(filepath.Dir(m.File), name)
}

func (v *validator) telemetry(t *Telemetry) {
	mq := t.MQTT
	if mq == nil {
		return
	}
	const path = "telemetry.mqtt"
	u, err := mq.BrokerURL()
	if err != nil {
		v.errorf(mq.At.Of("broker"), path+".broker", "%v", err)
	}
	if p := mq.TopicPrefix; mq.At.Has("topic_prefix") && (strings.Trim(p, "/") == "" || strings.ContainsAny(p, "+#\x00") || strings.HasPrefix(p, "/")) {
		v.errorf(mq.At.Of("topic_prefix"), path+".topic_prefix", "must be a topic without wildcards (+, #) or a leading /, e.g. site/greenhouse; got %q", p)
	}
	if mq.QoS != nil && *mq.QoS != 0 && *mq.QoS != 1 {
		v.errorf(mq.At.Of("qos"), path+".qos", "must be 0 or 1, got %d", *mq.QoS)
	}
	if mq.At.Has("client_id") && mq.ClientID == "" {
		v.errorf(mq.At.Of("client_id"), path+".client_id", "must not be empty")
	}
	if u != nil && mq.PasswordFile != "" && u.User == nil {
		v.errorf(mq.At.Of("password_file"), path+".password_file", "a password needs a user name: mqtt://USER@HOST (MQTT 3.1.1)")
	}
	if u != nil && mq.CAFile != "" && u.Scheme != "mqtts" {
		v.errorf(mq.At.Of("ca_file"), path+".ca_file", "verifies an mqtts broker; %s is not TLS", u.Scheme)
	}
	for _, c := range v.m.Capabilities {
		if c.Kind == KindRead {
			return
		}
	}
	v.errorf(t.At.Of("mqtt"), path, "the device has no read capability to publish")
}
