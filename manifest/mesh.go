package manifest

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Mesh defaults (PhysMCP v0.1 for max_peers and heartbeat_interval_ms).
const (
	DefaultMeshPort          = 7946
	DefaultMaxPeers          = 10
	DefaultHeartbeatInterval = time.Second
	// MinHeartbeatInterval and MaxHeartbeatInterval bound
	// heartbeat_interval_ms: below 100 ms probes crowd out everything else
	// on a small board, above a minute a dead peer goes unnoticed for too long.
	MinHeartbeatInterval = 100 * time.Millisecond
	MaxHeartbeatInterval = time.Minute
)

// HeartbeatInterval is heartbeat_interval_ms with its default.
func (ms *Mesh) HeartbeatInterval() time.Duration {
	if ms.HeartbeatIntervalMs == 0 {
		return DefaultHeartbeatInterval
	}
	return time.Duration(ms.HeartbeatIntervalMs) * time.Millisecond
}

// Peers is max_peers with its default.
func (ms *Mesh) Peers() int {
	if ms.MaxPeers == 0 {
		return DefaultMaxPeers
	}
	return ms.MaxPeers
}

// Port is bind_port with its default; 0 (written out) picks a free port.
func (ms *Mesh) Port() int {
	if ms.BindPort == nil {
		return DefaultMeshPort
	}
	return *ms.BindPort
}

// Bind is bind_address with its default, every interface.
func (ms *Mesh) Bind() string {
	if ms.BindAddress == "" {
		return "0.0.0.0"
	}
	return ms.BindAddress
}

// MDNSEnabled is mdns with its default, on.
func (ms *Mesh) MDNSEnabled() bool { return ms.MDNS == nil || *ms.MDNS }

// KeyPath is key_file resolved against the manifest's directory ("" without one).
func (ms *Mesh) KeyPath(manifestFile string) string {
	if ms.KeyFile == "" || filepath.IsAbs(ms.KeyFile) {
		return ms.KeyFile
	}
	return filepath.Join(filepath.Dir(manifestFile), ms.KeyFile)
}

// LoadKeys reads the gossip keyring from key_file: one base64 key of 16, 24
// or 32 bytes (AES-128/192/256) per line, the first one the key this node
// encrypts with, the others accepted too (for rotating keys). Blank lines
// and lines starting with # are skipped. Without key_file it returns nil.
func (ms *Mesh) LoadKeys(manifestFile string) ([][]byte, error) {
	path := ms.KeyPath(manifestFile)
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", path, errors.Unwrap(err))
	}
	keys, err := ParseMeshKeys(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// ParseMeshKeys parses the contents of a mesh key file (see LoadKeys).
func ParseMeshKeys(data []byte) ([][]byte, error) {
	var keys [][]byte
	for i, line := range bytes.Split(data, []byte("\n")) {
		s := strings.TrimSpace(string(line))
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("line %d: not base64: %v", i+1, err)
		}
		switch len(k) {
		case 16, 24, 32:
		default:
			return nil, fmt.Errorf("line %d: a key is 16, 24 or 32 bytes (AES-128/192/256), this one is %d", i+1, len(k))
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("holds no key; make one with: head -c 32 /dev/urandom | base64")
	}
	return keys, nil
}

// validateMesh checks network.mesh. A mesh that listens beyond loopback must
// encrypt: without a keyring any host on the network could join and claim
// to be any device.
func (v *validator) mesh(ms *Mesh) {
	const path = "network.mesh."
	if ms.MaxPeers < 0 {
		v.errorf(ms.At.Of("max_peers"), path+"max_peers", "must not be negative, got %d", ms.MaxPeers)
	}
	if ms.At.Has("heartbeat_interval_ms") {
		if d := time.Duration(ms.HeartbeatIntervalMs) * time.Millisecond; d < MinHeartbeatInterval || d > MaxHeartbeatInterval {
			v.errorf(ms.At.Of("heartbeat_interval_ms"), path+"heartbeat_interval_ms", "must be %d..%d, got %d",
				MinHeartbeatInterval.Milliseconds(), MaxHeartbeatInterval.Milliseconds(), ms.HeartbeatIntervalMs)
		}
	}
	if ms.BindPort != nil && (*ms.BindPort < 0 || *ms.BindPort > 65535) {
		v.errorf(ms.At.Of("bind_port"), path+"bind_port", "must be a port 0..65535 (0: any free port), got %d", *ms.BindPort)
	}
	for _, k := range []struct{ key, addr string }{{"bind_address", ms.BindAddress}, {"advertise_address", ms.AdvertiseAddress}} {
		if ms.At.Has(k.key) && net.ParseIP(k.addr) == nil {
			v.errorf(ms.At.Of(k.key), path+k.key, "must be an IP address, got %q", k.addr)
		}
	}
	if ip := net.ParseIP(ms.AdvertiseAddress); ip != nil && ip.IsUnspecified() {
		v.errorf(ms.At.Of("advertise_address"), path+"advertise_address", "%s is where no peer can reach this node; name the address peers should use", ms.AdvertiseAddress)
	}
	for i, s := range ms.SeedPeers {
		if err := checkSeedPeer(s); err != nil {
			v.errorf(ms.At.Of("seed_peers"), fmt.Sprintf("%sseed_peers[%d]", path, i), "%v", err)
		}
	}
	if ms.At.Has("key_file") && strings.TrimSpace(ms.KeyFile) == "" {
		v.errorf(ms.At.Of("key_file"), path+"key_file", "must not be empty")
	}
	if ms.Enabled && ms.KeyFile == "" {
		if ip := net.ParseIP(ms.Bind()); ip == nil || !ip.IsLoopback() {
			at := ms.At.Of("enabled")
			if ms.At.Has("bind_address") {
				at = ms.At.Of("bind_address")
			}
			v.errorf(at, path+"key_file", "a mesh listening on %s needs key_file (the gossip keyring): without it any host on the network could join and pose as a device; "+
				"create one with: head -c 32 /dev/urandom | base64 > mesh.key (or bind_address: 127.0.0.1 to try the mesh on one machine)", ms.Bind())
		}
	}
}

// checkSeedPeer accepts HOST or HOST:PORT (the port defaulting to 7946).
func checkSeedPeer(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("must not be empty")
	}
	host, port := s, ""
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
	} else if strings.Count(s, ":") == 1 {
		return fmt.Errorf("%q: want HOST or HOST:PORT: %v", s, err)
	}
	if host == "" {
		return fmt.Errorf("%q: the host is missing", s)
	}
	if port != "" {
		var n int
		if _, err := fmt.Sscanf(port, "%d", &n); err != nil || n < 1 || n > 65535 || fmt.Sprint(n) != port {
			return fmt.Errorf("%q: the port must be 1..65535", s)
		}
	}
	return nil
}
