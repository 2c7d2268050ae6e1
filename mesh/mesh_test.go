package mesh

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// testKey is a fresh keyring per test: meshes of tests running at the same
// time on this host (mDNS reaches them all) never merge.
func testKey(t testing.TB) [][]byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return [][]byte{k}
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("MESH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func nodeConfig(t testing.TB, name, zone string, keys [][]byte, hb time.Duration, seeds ...string) Config {
	return Config{
		DeviceID: name, Zone: zone, Profile: "full", Endpoint: "http://127.0.0.1:1/mcp", CapsHash: "c0ffee",
		Tags: Digest([]string{"temperature", "loc:" + zone}), BindAddr: "127.0.0.1", BindPort: 0,
		SeedPeers: seeds, MaxPeers: 32, HeartbeatInterval: hb, Keys: keys, Logger: testLogger(t),
	}
}

func startNode(t testing.TB, name, zone string, keys [][]byte, hb time.Duration, seeds ...string) *Mesh {
	t.Helper()
	return startConfig(t, nodeConfig(t, name, zone, keys, hb, seeds...))
}

func startConfig(t testing.TB, cfg Config) *Mesh {
	t.Helper()
	m, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// The nodes talk over a memNet in a synctest bubble: on loopback and the wall
// clock, a host that stalled the process for longer than the suspicion
// timeout (two heartbeats) hid c's suspicion from the watch, which reads the
// member table every quarter heartbeat ("c was not suspected before it was
// dead", at load 20).
func TestSeedDiscoveryAndFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hb = 200 * time.Millisecond
		keys, network := testKey(t), newMemNet()
		defer network.close(hb)
		a := network.start(t, nodeConfig(t, "node_a", "north", keys, hb))
		seed := a.Self().Addr
		b := network.start(t, nodeConfig(t, "node_b", "north", keys, hb, seed))
		c := network.start(t, nodeConfig(t, "node_c", "south", keys, hb, seed))
		took := waitFor(t, 2*scoutFast, "3 nodes converge", func() bool {
			return a.Alive("") == 2 && b.Alive("") == 2 && c.Alive("") == 2
		})
		t.Logf("3 nodes converged in %s", took)
		if got := a.Alive("north"); got != 1 {
			t.Errorf("Alive(north) on a = %d, want 1 (b; a itself is not counted)", got)
		}
		p, ok := a.Peer("node_c")
		if !ok || p.Zone != "south" || p.Endpoint != "http://127.0.0.1:1/mcp" || p.CapsHash != "c0ffee" || !p.Tags.MayHave("temperature") || p.Tags.MayHave("humidity") && p.Tags.MayHave("pressure") {
			t.Errorf("a sees c as %+v", p)
		}
		if s := a.SizeEstimate(); s != 3 {
			t.Errorf("SizeEstimate = %d, want 3", s)
		}

		// c fails without a goodbye: a must suspect it, then declare it dead,
		// within the bound at the worst health score (Lifeguard slows a prober
		// that misses acks, and a loaded host makes it miss them).
		events, cancel := a.Subscribe(16)
		defer cancel()
		tm := a.Timing()
		worst := tm.Slowed(awarenessMax - 1)
		health := a.Status().Health
		killed := time.Now()
		c.crash()
		guard := time.After(worst.SuspectAtLatest + worst.DeadAfter)
		var suspectAt, deadAt time.Duration
		var bSuspected []State // b's states other than alive, as a saw them
		for deadAt == 0 {
			select {
			case ev := <-events:
				if ev.Kind != PeerChanged {
					continue
				}
				if ev.Peer.NodeID == "node_b" {
					bSuspected = append(bSuspected, ev.Peer.State)
					continue
				}
				switch ev.Peer.State {
				case Suspect:
					suspectAt = ev.At.Sub(killed)
				case Dead:
					deadAt = ev.At.Sub(killed)
				}
			case <-guard:
				t.Fatalf("c not declared dead within %s (suspected at the latest %s at health score 7, dead %s later)",
					worst.SuspectAtLatest+worst.DeadAfter, worst.SuspectAtLatest, worst.DeadAfter)
			}
		}
		at := tm.Slowed(health)
		t.Logf("heartbeat %s, health score %d at the kill: suspected after %s (bound %s), dead after %s (bound %s); now health %d",
			hb, health, suspectAt, at.SuspectWithin, deadAt, at.SuspectWithin+at.DeadAfter, a.Status().Health)
		if suspectAt == 0 || suspectAt > deadAt {
			t.Errorf("c was not suspected before it was dead")
		}
		// Last seen alive: no later than the suspicion (to within a watch tick).
		if p, _ := a.Peer("node_c"); p.State != Dead || p.LastSeen.After(killed.Add(suspectAt+tm.Interval/4)) {
			t.Errorf("c after death: %+v", p)
		}
		// b lives on. A starved prober can miss b's ack (with c gone there is
		// no relay to ask) and suspect b: b then refutes, as it does any
		// suspicion of itself, and a sees it alive again.
		took = waitFor(t, worst.SuspectAtLatest+worst.DeadAfter, "a sees b alive", func() bool { return a.Alive("") == 1 })
		if len(bSuspected) > 0 {
			t.Logf("a suspected b (false positive, refuted): %v; alive again after %s", bSuspected, took)
		}
	})
}

func TestLeaveIsNotDeath(t *testing.T) {
	const hb = 200 * time.Millisecond
	keys := testKey(t)
	a := startNode(t, "node_a", "z", keys, hb)
	b := startNode(t, "node_b", "z", keys, hb, a.Self().Addr)
	waitFor(t, 5*time.Second, "converge", func() bool { return a.Alive("") == 1 })
	b.Close()
	waitFor(t, 5*time.Second, "b left", func() bool { p, _ := a.Peer("node_b"); return p.State == Left })
}

// logLines keeps every record logged through it (all levels) as
// "message key=value ...", for a test to wait for what a node logged.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logLines) WithGroup(string) slog.Handler            { return l }

func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	line := r.Message
	r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	return nil
}

// has reports whether one line contains every part.
func (l *logLines) has(parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.lines, func(line string) bool {
		return !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) })
	})
}

// b, with another key, seeds a: a cannot open b's join and answers with an
// error b cannot open either; once both have logged that, neither lists the other.
func TestForeignKeyIsRefused(t *testing.T) {
	const hb = 200 * time.Millisecond
	var aLog, bLog logLines
	ca := nodeConfig(t, "node_a", "z", testKey(t), hb)
	ca.Logger = slog.New(&aLog)
	a := startConfig(t, ca)
	cb := nodeConfig(t, "node_b", "z", testKey(t), hb, a.Self().Addr)
	cb.Logger = slog.New(&bLog)
	b := startConfig(t, cb)
	waitFor(t, 30*time.Second, "a refuses b's join and b's join fails", func() bool {
		return a.Alive("") != 0 || b.Alive("") != 0 ||
			aLog.has("no installed keys could decrypt") && bLog.has("mesh: scouting", a.Self().Addr, "err=")
	})
	if a.Alive("") != 0 || b.Alive("") != 0 || len(a.Peers()) != 0 || len(b.Peers()) != 0 {
		t.Fatalf("nodes with different keys joined: a sees %v, b sees %v", a.Peers(), b.Peers())
	}
}

func TestMaxPeers(t *testing.T) {
	// A heartbeat long enough that a loaded host does not declare b dead,
	// which would rightly make room for c; gossip runs at hb/5 all the same.
	const hb = time.Second
	keys := testKey(t)
	a, err := Start(Config{DeviceID: "node_a", BindAddr: "127.0.0.1", MaxPeers: 1, HeartbeatInterval: hb, Keys: keys, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	startNode(t, "node_b", "z", keys, hb, a.Self().Addr)
	waitFor(t, 2*scoutFast, "b joins", func() bool { return a.Alive("") == 1 })
	startNode(t, "node_c", "z", keys, hb, a.Self().Addr)
	// c's join is refused, and so is c's next announcement, which gossip
	// (c's own, or b's: b admits c) brings later: the refusal holds.
	waitFor(t, 30*time.Second, "a refuses c twice", func() bool {
		_, admitted := a.Peer("node_c")
		return admitted || a.Status().MaxPeersRefused >= 2
	})
	if _, ok := a.Peer("node_c"); ok || len(a.Peers()) != 1 {
		t.Fatalf("max_peers 1 admitted a second peer: %v", a.Peers())
	}
}

func TestMetaFitsAndRefusesTooLong(t *testing.T) {
	nm := nodeMeta{V: metaVersion, Device: strings.Repeat("d", 64), Zone: strings.Repeat("z", 64), Profile: "full",
		Endpoint: "https://" + strings.Repeat("h", 100) + ":8765/mcp/group", CapsHash: strings.Repeat("0", 32)}
	b, err := nm.encode()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("metadata with long fields: %d bytes of %d", len(b), MaxMetaBytes)
	nm.Endpoint = "https://" + strings.Repeat("h", 400)
	if _, err := nm.encode(); err == nil {
		t.Fatal("metadata over 512 bytes accepted")
	}
	got, err := decodeMeta(b)
	if err != nil || got.Device != nm.Device {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, bad := range []string{"", "{", `{"v":2,"d":"x"}`, `{"v":1}`} {
		if _, err := decodeMeta([]byte(bad)); err == nil {
			t.Errorf("decodeMeta(%q) accepted", bad)
		}
	}
}

func TestTagDigest(t *testing.T) {
	words := []string{"temperature", "air", "greenhouse", "loc:north_bay"}
	d := Digest(words)
	for _, w := range words {
		if !d.MayHave(w) || !d.MayHave(strings.ToUpper(w)) {
			t.Errorf("digest lacks %q", w)
		}
	}
	fp := 0
	for i := range 1000 {
		if d.MayHave(fmt.Sprint("absent-", i)) {
			fp++
		}
	}
	if fp > 10 {
		t.Errorf("%d false positives in 1000 with 4 words", fp)
	}
	txt, _ := d.MarshalText()
	var back TagDigest
	if err := back.UnmarshalText(txt); err != nil || back != d || len(txt) != 43 {
		t.Errorf("text round trip: %q %v", txt, err)
	}
}

// crash stops m the way SIGKILL would: no goodbye to the peers.
func (m *Mesh) crash() {
	m.closed.Do(func() {
		close(m.stop)
		m.stopped.Wait()
		if m.mdns != nil {
			m.mdns.Shutdown()
		}
		m.ml.Shutdown()
	})
}

// A node whose seed peer is not up yet keeps trying while it is alone.
func TestSeedRetriedWhileAlone(t *testing.T) {
	const hb = 200 * time.Millisecond
	keys := testKey(t)
	probe, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := probe.LocalAddr().(*net.UDPAddr).Port
	probe.Close()
	seed := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var bLog logLines
	cb := nodeConfig(t, "node_b", "z", keys, hb, seed)
	cb.Logger = slog.New(&bLog)
	b := startConfig(t, cb)
	waitFor(t, 30*time.Second, "b's first join fails", func() bool { return bLog.has("mesh: scouting", seed, "err=") })
	a, err := Start(Config{DeviceID: "node_a", BindAddr: "127.0.0.1", BindPort: port, MaxPeers: 8, HeartbeatInterval: hb, Keys: keys, Logger: testLogger(t)})
	if err != nil {
		t.Skipf("the seed's port was taken meanwhile: %v", err)
	}
	defer a.Close()
	// Alone, b scouts every scoutFast (not scoutEvery).
	took := waitFor(t, 2*scoutFast, "b retries its seed", func() bool { return b.Alive("") == 1 && a.Alive("") == 1 })
	t.Logf("joined the late seed %s after it started", took)
}
