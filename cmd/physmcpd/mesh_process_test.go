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
	// At debug level a node logs each of its full syncs (awaitMesh).
	p.cmd = exec.Command(bin, "serve", "--manifest", mf, "--policy", filepath.Join(dir, "policy.yml"), "--simulate", "--http", "127.0.0.1:0", "--log-level", "debug")
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
	p, _ := peerOf(lp, id)
	return p.State
}

func peerOf(lp listPeers, id string) (mesh.Peer, bool) {
	for _, p := range lp.Peers {
		if p.NodeID == id {
			return p, true
		}
	}
	return mesh.Peer{}, false
}

// peerEventRE is a node's log line of a peer's change: its time, the new
// state and the peer.
var peerEventRE = regexp.MustCompile(`(?m)^time=(\S+) level=\S+ msg="mesh: peer (joined|alive|suspected|dead|left)" node=(\S+)`)

// peerEvent is one change of a peer that a node logged.
type peerEvent struct {
	at          time.Time
	state, node string
}

// peerEvents is what p logged of its peers, in order: the node's own report,
// which a test that polls its state could miss when the host stalls the test.
func peerEvents(t testing.TB, p *meshProc) []peerEvent {
	t.Helper()
	var evs []peerEvent
	for _, m := range peerEventRE.FindAllStringSubmatch(p.log.String(), -1) {
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("%s logged a peer change at %q: %v", p.id, m[1], err)
		}
		evs = append(evs, peerEvent{at, m[2], m[3]})
	}
	return evs
}

// fullSyncRE is a node's log line of a full sync it began with a peer
// (memberlist's periodic push-pull; a join's names no peer).
var fullSyncRE = regexp.MustCompile(`(?m)^time=(\S+) level=DEBUG msg="mesh: memberlist: Initiating push/pull sync with: \S`)

// fullSyncs counts the full syncs p began after since.
func fullSyncs(t testing.TB, p *meshProc, since time.Time) int {
	t.Helper()
	n := 0
	for _, m := range fullSyncRE.FindAllStringSubmatch(p.log.String(), -1) {
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("%s logged a full sync at %q: %v", p.id, m[1], err)
		}
		if at.After(since) {
			n++
		}
	}
	return n
}

// stuckAfter is how long awaitMesh waits for nodes that make no progress.
const stuckAfter = time.Minute

// awaitMesh polls cond until it holds. It gives up once every node of procs
// has completed syncs full syncs since since (it began syncs+1): the mesh
// protocol's own clock, which runs slower on a loaded host, where a
// wall-clock budget failed the test although the nodes were only starved.
func awaitMesh(t testing.TB, procs []*meshProc, since time.Time, syncs int, cond func() bool, what func() string) {
	t.Helper()
	for !cond() {
		done := true
		for _, p := range procs {
			done = done && fullSyncs(t, p, since) > syncs
		}
		if done && !cond() {
			t.Fatalf("not after %d full syncs of every node: %s", syncs, what())
		}
		if time.Since(since) > stuckAfter {
			t.Fatalf("the nodes did not make %d full syncs each within %s: %s", syncs, stuckAfter, what())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// meshView is what each node lists, for a failure message.
func meshView(t testing.TB, procs []*meshProc) string {
	t.Helper()
	var b strings.Builder
	for _, p := range procs {
		fmt.Fprintf(&b, "\n%s lists", p.id)
		for _, q := range peersOf(t, p.endpoint).Peers {
			fmt.Fprintf(&b, " %s %s since %s;", q.NodeID, q.State, q.Since.Format("15:04:05.000"))
		}
	}
	return b.String()
}

// Five real physmcpd processes find each other from one seed peer, list
// each other correctly, and see a SIGKILLed one suspected, then dead, within
// the configured heartbeats.
func TestMeshFiveProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds physmcpd and runs five processes")
	}
	const hb = 500 * time.Millisecond
	tm := mesh.TimingFor(hb, 5)
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
	last := time.Now()

	// Converged: every node has reported every other one joined (alive).
	// Gossip usually does it within a few gossip intervals; a full sync with
	// a peer that knows them does it even when a node missed that gossip.
	var joinedIn time.Duration
	awaitMesh(t, procs, last, 2, func() bool {
		for _, p := range procs {
			joined := map[string]bool{}
			for _, ev := range peerEvents(t, p) {
				if ev.state == "joined" {
					joined[ev.node] = true
				}
			}
			if len(joined) != 4 {
				return false
			}
		}
		joinedIn = time.Since(started)
		return true
	}, func() string {
		return "5 nodes (seed peer only, no mDNS) did not all report the other 4 joined:" + meshView(t, procs)
	})
	// A node starved for longer than a probe's deadline is suspected by its
	// peers until it refutes (docs/mesh.md): that passes.
	awaitMesh(t, procs, time.Now(), 2, func() bool {
		for _, p := range procs {
			if alivePeers(peersOf(t, p.endpoint)) != 4 {
				return false
			}
		}
		return true
	}, func() string { return "5 nodes did not all list the other 4 alive at once:" + meshView(t, procs) })
	t.Logf("5 processes started in %s; all reported the other 4 joined %s after start, and listed them alive %s after start",
		allStarted.Round(time.Millisecond), joinedIn.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))

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

	out := meshStatusUntil(t, procs, seed.endpoint, "mesh: 5 nodes (alive 5, suspected 0, dead 0, left 0); partition none")
	for _, want := range []string{"node node_1 (zone north, full)", "heartbeat 500 ms", "gossip encrypted", "node_2", "node_5"} {
		if !strings.Contains(out, want) {
			t.Errorf("mesh status lacks %q:\n%s", want, out)
		}
	}

	// SIGKILL node_5: node_1 must report it suspected, then dead, within
	// the bound at the highest health score (a starved prober's), counted
	// in the survivors' full syncs, and hear of it at the next one. The
	// times are logged, not checked: five processes on the wall clock miss
	// them by however long a loaded host stalls them. The mesh package
	// checks them on its own clock (TestProbingTheDeadKeepsProbersHealthy).
	victim := procs[4]
	killed := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	worst := tm.Slowed(mesh.MaxHealthScore)
	syncs := int((worst.SuspectAtLatest+worst.DeadAfter)/tm.FullSync) + 2
	var changes []peerEvent
	awaitMesh(t, procs[:4], killed, syncs, func() bool {
		changes = changes[:0]
		for _, ev := range peerEvents(t, seed) {
			if ev.node == victim.id && ev.at.After(killed) {
				changes = append(changes, ev)
			}
		}
		return len(changes) > 0 && changes[len(changes)-1].state == "dead"
	}, func() string {
		return fmt.Sprintf("node_1 did not report node_5 dead (changes %v):%s", changes, meshView(t, procs[:4]))
	})
	if len(changes) != 2 || changes[0].state != "suspected" {
		t.Errorf("node_1 reported node_5 %v after the kill, want suspected then dead", changes)
	} else {
		t.Logf("heartbeat %s: node_1 reported node_5 suspected after %s (usually within %s, at the latest %s at health score 0), dead after %s (%s later)", hb,
			changes[0].at.Sub(killed).Round(time.Millisecond), tm.SuspectWithin, tm.SuspectAtLatest, changes[1].at.Sub(killed).Round(time.Millisecond), tm.DeadAfter)
	}
	out = meshStatusUntil(t, procs[:4], seed.endpoint, "mesh: 4 nodes (alive 4, suspected 0, dead 1, left 0)")
	if !regexp.MustCompile(`node_5\s+south\s+dead`).MatchString(out) {
		t.Errorf("mesh status after the kill:\n%s", out)
	}
}

// meshStatusUntil runs `mesh status` at endpoint until its output holds
// counts (the peers' states, which a starved node's suspicion and
// refutation may change for a moment) and returns that output.
func meshStatusUntil(t testing.TB, procs []*meshProc, endpoint string, counts string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	awaitMesh(t, procs, time.Now(), 2, func() bool {
		out.Reset()
		errOut.Reset()
		if code := run([]string{"mesh", "status", "--url", endpoint, "--token", meshToken}, &out, &errOut); code != 0 {
			t.Fatalf("mesh status: exit %d: %s", code, errOut.String())
		}
		return strings.Contains(out.String(), counts)
	}, func() string { return fmt.Sprintf("mesh status never said %q; last:\n%s", counts, out.String()) })
	return out.String()
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
