package manifest

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
)

// sinkSchemes are the address schemes each remote_sink type takes, with
// the port an address without one gets.
var sinkSchemes = map[string]map[string]string{
	"syslog": {"syslog+tcp": "514", "syslog+udp": "514"},
	"http":   {"http": "80", "https": "443"},
	"mqtt":   {"mqtt": "1883", "mqtts": "8883"},
}

// SinkURL parses the sink's address: a URL whose scheme belongs to the
// type, with a host, and for mqtt the topic as its path. A missing port is
// the scheme's usual one. The error names what is wrong, not where (validate
// adds the position).
func (r *RemoteSink) SinkURL() (*url.URL, error) {
	schemes, ok := sinkSchemes[r.Type]
	if !ok {
		return nil, fmt.Errorf("type must be syslog, http or mqtt, got %q", r.Type)
	}
	u, err := url.Parse(r.Address)
	if err != nil {
		return nil, fmt.Errorf("address is not a URL: %v", err)
	}
	port, ok := schemes[u.Scheme]
	if !ok {
		return nil, fmt.Errorf("address %q: a %s sink's scheme is one of %s", r.Address, r.Type, strings.Join(slices.Sorted(maps.Keys(schemes)), ", "))
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("address %q names no host", r.Address)
	}
	switch r.Type {
	case "syslog":
		if u.Path != "" || u.RawQuery != "" || u.User != nil {
			return nil, fmt.Errorf("address %q: a syslog sink is host:port only", r.Address)
		}
	case "mqtt":
		if strings.Trim(u.Path, "/") == "" {
			return nil, fmt.Errorf("address %q names no topic: mqtt://HOST:PORT/TOPIC", r.Address)
		}
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), port)
	}
	return u, nil
}
