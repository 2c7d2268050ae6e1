// Package sink has the remote sinks of the audit trail (manifest
// audit.remote_sink): syslog (RFC 5424), HTTP (JSON lines) and MQTT. Each
// ships the trail's lines byte for byte, so a receiver holding the trail's
// key can check the chain: every line's "prev" is the HMAC of the line
// before it.
package sink

import (
	"fmt"
	"time"

	"github.com/physmcp/physmcpd/audit"
	"github.com/physmcp/physmcpd/manifest"
)

// timeout bounds one connection attempt or one batch, so a sink that hangs
// is retried like one that refuses.
const timeout = 10 * time.Second

// New returns the sender for rs and the name the trail's cursor records it
// under (its address without a password).
func New(rs *manifest.RemoteSink) (audit.Sender, string, error) {
	u, err := rs.SinkURL()
	if err != nil {
		return nil, "", fmt.Errorf("audit.remote_sink: %w", err)
	}
	name := rs.Type + " " + u.Redacted()
	switch rs.Type {
	case "syslog":
		return newSyslog(u), name, nil
	case "http":
		return newHTTP(u), name, nil
	default: // mqtt: SinkURL accepts no other type
		return newMQTT(u), name, nil
	}
}
