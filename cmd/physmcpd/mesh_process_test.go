//go:build !lite

package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/internal/testenv"
	"github.com/physmcp/physmcpd/mesh"
)

// meshToken is the operator token of the process test's policy.
const meshToken = "mesh-example-token-do-not-use"

// meshNodeManifest is one simulated device of the process test: gossip on
// a free loopback port, heartbeat hb.
func meshNodeManifest(id, zone string, seeds []string, mdns bool, hb time.Duration) string {
	seedList := "[]"
	if len(seeds) > 0 {
		seedList = `["` + strings.Join(seeds, `", "`) + `"]`
	}
	return fmt.Sprintf(`physmcp_version: "0.1"
device: {id: %s, type: sensor_node, location: {zone: %s}}
network:
  mesh: {enabled: true, seed_peers: %s, bind_address: 127.0.0.1, bind_port: 0, mdns: %t, heartbeat_interval_ms: %d, key_file: mesh.key}
buses:
  i2c1: {type: i2c, device: "1", simulated: true}
capabilities:
  - name: %s_temperature
    kind: read
    description: Air temperature at the node.
    binding: {bus: i2c1, address: "0x48:reg=0x00:width=2:byte_order=big:signed=true:shift=4:scale=0.0625"}
    data_type: float
    unit: "°C"
    range: {min: -40, max: 125}
    semantic_tags: [temperature, air, %s]
    simulation: {initial: 20}
`, id, zone, seedList, mdns, hb.Milliseconds(), zone, zone)
}

// meshNodePolicy asks HTTP callers for meshToken.
const meshNodePolicy = `physmcp_policy_version: "0.1"
identity:
  local_role: operator
  providers:
    - type: static
      tokens:
        - {name: mesh_test, sha256: %x, role: operator}
`

// meshProc is one physmcpd serve process.
type meshProc struct {
	id, endpoint, gossip string
	cmd                  *exec.Cmd
	log                  *serveLogBuffer
}

var (
	listeningRE = regexp.MustCompile(`msg=listening url=(\S+)`)
	gossipRE    = regexp.MustCompile(`mesh: joined as \S+" gossip=(\S+)`)
)

// startMeshProc serves manifest and waits for its endpoint and gossip address.
func startMeshProc(t testing.TB, bin, dir, id, manifest string) *meshProc {
	t.Helper()
	mf := writeFile(t, dir, id+".manifest.yml", manifest)
	p := &meshProc{id: id, log: &serveLogBuffer{}}
	p.cmd = exec.Command(bin, "serve", "--manifest", mf, "--policy", filepath.Join(dir, "policy.yml"), "--simulate", "--http", "127.0.0.1:0")
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		if t.Failed() {
			t.Logf("%s:\n%s", id, p.log.String())
		}
	})
	for deadline := time.Now().Add(20 * time.Second); p.endpoint == "" || p.gossip == ""; time.Sleep(10 * time.Millisecond) {
		text := p.log.String()
		if m := listeningRE.FindStringSubmatch(text); m != nil {
			p.endpoint = m[1]
		}
		if m := gossipRE.FindStringSubmatch(text); m != nil {
			p.gossip = m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not start:\n%s", id, text)
		}
	}
	return p
}

// meshDir writes a fresh keyring (so that no other mesh on this host, of
// another test or another run, merges with this one) and the policy.
func meshDir(t testing.TB) string {
	dir := t.TempDir()
	key := make([]byte, 32)
	rand.Read(key)
	writeFile(t, dir, "mesh.key", base64.StdEncoding.EncodeToString(key)+"\n")
	writeFile(t, dir, "policy.yml", fmt.Sprintf(meshNodePolicy, sha256.Sum256([]byte(meshToken))))
	return dir
}

func peersOf(t testing.TB, endpoint string) listPeers {
	t.Helper()
	var lp listPeers
	if err := (rpcClient{url: endpoint, token: meshToken, http: &http.Client{Timeout: 5 * time.Second}}).call("physmcp/list_peers", &lp); err != nil {
		t.Fatal(err)
	}
	return lp
}

func alivePeers(lp listPeers) int {
	n := 0
	for _, p := range lp.Peers {
		if p.State == mesh.Alive {
			n++
		}
	}
	return n
}

func peerState(lp listPeers, id string) mesh.State {
	for _, p := range lp.Peers {
		if p.NodeID == id {
			return p.State
		}
	}
	return ""
}

// Five real physmcpd processes find each other from one seed peer, list
// each other correctly, and see a SIGKILLed one suspected, then dead, within
// the configured heartbeats.
func TestMeshFiveProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds physmcpd and runs five processes")
	}
	const hb = 500 * time.Millisecond
	bin := buildBinary(t, "")
	dir := meshDir(t)
	zones := []string{"north", "north", "south", "south", "south"}
	started := time.Now()
	seed := startMeshProc(t, bin, dir, "node_1", meshNodeManifest("node_1", zones[0], nil, false, hb))
	procs := []*meshProc{seed}
	for i := 2; i <= 5; i++ {
		id := fmt.Sprintf("node_%d", i)
		procs = append(procs, startMeshProc(t, bin, dir, id, meshNodeManifest(id, zones[i-1], []string{seed.gossip}, false, hb)))
	}
	allStarted := time.Since(started)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		converged := true
		for _, p := range procs {
			converged = converged && alivePeers(peersOf(t, p.endpoint)) == 4
		}
		if converged {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 nodes (seed peer only, no mDNS) did not converge within 15 s")
		}
	}
	t.Logf("5 processes started in %s; all list 4 alive peers %s after start", allStarted.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))

	// What node_1 lists is what each node says of itself.
	lp := peersOf(t, seed.endpoint)
	if lp.Self == nil || lp.Self.NodeID != "node_1" || lp.Self.Endpoint != seed.endpoint || lp.Self.Zone != "north" {
		t.Errorf("self = %+v", lp.Self)
	}
	for i, p := range procs[1:] {
		var got *mesh.Peer
		for j := range lp.Peers {
			if lp.Peers[j].NodeID == p.id {
				got = &lp.Peers[j]
			}
		}
		if got == nil {
			t.Fatalf("node_1 does not list %s", p.id)
		}
		var doc mesh.Document
		if err := (rpcClient{url: p.endpoint, token: meshToken, http: http.DefaultClient}).call("physmcp/manifest", &doc); err != nil {
			t.Fatal(err)
		}
		if got.DeviceID != p.id || got.Endpoint != p.endpoint || got.Addr != p.gossip || got.Zone != zones[i+1] ||
			got.CapsHash != doc.CapsHash || !got.Tags.MayHave(zones[i+1]) || !got.Tags.MayHave("loc:"+zones[i+1]) || got.Profile != "full" {
			t.Errorf("node_1 lists %+v; %s says endpoint %s, gossip %s, capabilities hash %s", *got, p.id, p.endpoint, p.gossip, doc.CapsHash)
		}
	}

	// The extension methods are behind the endpoint's authentication.
	if err := (rpcClient{url: seed.endpoint, http: http.DefaultClient}).call("physmcp/list_peers", &lp); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("list_peers without a token: %v, want 401", err)
	}

	var out, errOut bytes.Buffer
	if code := run([]string{"mesh", "status", "--url", seed.endpoint, "--token", meshToken}, &out, &errOut); code != 0 {
		t.Fatalf("mesh status: exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"node node_1 (zone north, full)", "mesh: 5 nodes (alive 5, suspected 0, dead 0, left 0); partition none",
		"heartbeat 500 ms", "gossip encrypted", "node_2", "node_5"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("mesh status lacks %q:\n%s", want, out.String())
		}
	}

	// SIGKILL node_5: node_1 must list it suspected, then dead.
	victim := procs[4]
	killed := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	var suspected, dead time.Duration
	for ; dead == 0; time.Sleep(20 * time.Millisecond) {
		switch peerState(peersOf(t, seed.endpoint), victim.id) {
		case mesh.Suspect:
			if suspected == 0 {
				suspected = time.Since(killed)
			}
		case mesh.Dead:
			dead = time.Since(killed)
		}
		if time.Since(killed) > 20*hb {
			t.Fatalf("node_1 did not declare node_5 dead within 20 heartbeats")
		}
	}
	// The bounds are logged, not checked: five processes on the wall clock
	// miss them by however long a loaded host stalls them. The mesh
	// package checks them on its own clock (TestProbingTheDeadKeepsProbersHealthy).
	tm := mesh.TimingFor(hb, 5)
	t.Logf("heartbeat %s: node_5 suspected after %s (bound %s), dead after %s (bound %s)", hb,
		suspected.Round(time.Millisecond), tm.SuspectWithin, dead.Round(time.Millisecond), tm.SuspectWithin+tm.DeadAfter)
	if suspected == 0 {
		t.Errorf("node_5 went from alive to dead without being suspected")
	}
	out.Reset()
	run([]string{"mesh", "status", "--url", seed.endpoint, "--token", meshToken}, &out, &errOut)
	if !strings.Contains(out.String(), "mesh: 4 nodes (alive 4, suspected 0, dead 1, left 0)") || !regexp.MustCompile(`node_5\s+south\s+dead`).MatchString(out.String()) {
		t.Errorf("mesh status after the kill:\n%s", out.String())
	}
}

// Two nodes without seed peers find each other by mDNS alone.
func TestMeshMDNSDiscovery(t *testing.T) {
	if testing.Short() {
		t.Skip("builds physmcpd and runs two processes")
	}
	bin := buildBinary(t, "")
	dir := meshDir(t)
	a := startMeshProc(t, bin, dir, "mdns_a", meshNodeManifest("mdns_a", "east", nil, true, 500*time.Millisecond))
	if strings.Contains(a.log.String(), "mDNS unavailable") {
		testenv.Missing(t, "this host has no multicast interface for mDNS: %s", a.log.String())
	}
	b := startMeshProc(t, bin, dir, "mdns_b", meshNodeManifest("mdns_b", "west", nil, true, 500*time.Millisecond))
	start := time.Now()
	for deadline := start.Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if alivePeers(peersOf(t, a.endpoint)) == 1 && alivePeers(peersOf(t, b.endpoint)) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("two nodes with mDNS and no seed peers did not find each other within 15 s")
		}
	}
	t.Logf("found each other by mDNS %s after the second started", time.Since(start).Round(time.Millisecond))
}
