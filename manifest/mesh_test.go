package manifest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A mesh on loopback needs no keyring; the defaults are PhysMCP's.
func TestMeshLoopbackAndDefaults(t *testing.T) {
	text := strings.Replace(readFile(t, greenhouse), "audit:", "network:\n  mesh: {enabled: true, bind_address: 127.0.0.1}\naudit:", 1)
	m, diags := Parse("m.yml", []byte(text))
	if m == nil {
		t.Fatal(diags)
	}
	ms := m.Network.Mesh
	if ms.HeartbeatInterval() != time.Second || ms.Peers() != 10 || ms.Port() != 7946 || !ms.MDNSEnabled() {
		t.Fatalf("defaults: heartbeat %s, max_peers %d, port %d, mdns %v", ms.HeartbeatInterval(), ms.Peers(), ms.Port(), ms.MDNSEnabled())
	}
	if keys, err := ms.LoadKeys(m.File); keys != nil || err != nil {
		t.Fatalf("no key_file: %v %v", keys, err)
	}
}

func TestMeshKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("good.key", "# rotated keys\n\nn/ybV659xBRpdDZivl3BWoHpSizbrS6kyZfzVItO0Tc=\nAAAAAAAAAAAAAAAAAAAAAA==\n")
	write("short.key", "AAAA\n")
	write("junk.key", "not base64!\n")
	write("empty.key", "# nothing\n")
	ms := &Mesh{KeyFile: "good.key"}
	keys, err := ms.LoadKeys(filepath.Join(dir, "m.yml"))
	if err != nil || len(keys) != 2 || len(keys[0]) != 32 || len(keys[1]) != 16 {
		t.Fatalf("good.key: %d keys, %v", len(keys), err)
	}
	for name, want := range map[string]string{"short.key": "line 1: a key is 16, 24 or 32 bytes", "junk.key": "line 1: not base64",
		"empty.key": "holds no key", "missing.key": "cannot read"} {
		ms := &Mesh{KeyFile: name}
		if _, err := ms.LoadKeys(filepath.Join(dir, "m.yml")); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
}
