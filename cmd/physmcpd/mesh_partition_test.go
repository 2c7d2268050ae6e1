//go:build !lite

package main

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/internal/testenv"
	"github.com/physmcp/physmcpd/mesh"
)

// partitionManifest is node i of the partition test: gossip and MCP calls
// between nodes on the data network 10.77.0.0/24 (which the test splits),
// HTTP also reachable by the test over a management link that never fails.
func partitionManifest(i int, hb time.Duration) string {
	return fmt.Sprintf(`physmcp_version: "0.1"
device: {id: node_%d, type: valve_controller, location: {zone: site}}
network:
  mesh: {enabled: true, seed_peers: ["10.77.0.1:7946"], bind_address: 10.77.0.%d, bind_port: 7946, advertise_address: 10.77.0.%d, mdns: false, heartbeat_interval_ms: %d, key_file: mesh.key}
buses:
  gpio: {type: gpio, chip: pinctrl-bcm2711, simulated: true}
capabilities:
  - name: valve
    kind: do
    description: Open (true) or close (false) the shared valve.
    binding: {bus: gpio, line: GPIO22, safe_level: low}
    data_type: bool
    semantic_tags: [valve]
    safe_value: false
`, i, i, i, hb.Milliseconds())
}

// partitionPolicy: do_valve needs 3 nodes of the whole mesh.
const partitionPolicy = `physmcp_policy_version: "0.1"
capabilities:
  do_valve:
    rules:
      - {type: quorum, min_peers: 3, peers: mesh}
identity:
  local_role: operator
  mesh: {role: operator}
  providers:
    - type: static
      tokens:
        - {name: mesh_test, sha256: %x, role: operator}
`

// netLab is five network namespaces: nodes 1-3 on bridge a, 4-5 on bridge
// b, the bridges joined by one veth pair (the link the test takes down),
// and a management link from this namespace to each node.
type netLab struct {
	t      *testing.T
	prefix string
}

func (l netLab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (l netLab) ns(i int) string { return fmt.Sprintf("%sn%d", l.prefix, i) }
func (l netLab) hub() string     { return l.prefix + "hub" }

func newNetLab(t *testing.T) netLab {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "the partition test needs root for network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		testenv.Missing(t, "the partition test needs ip (iproute2): %v", err)
	}
	l := netLab{t: t, prefix: fmt.Sprintf("pm%d", os.Getpid()%100000)}
	t.Cleanup(func() {
		for i := 1; i <= 5; i++ {
			exec.Command("ip", "netns", "del", l.ns(i)).Run()
		}
		exec.Command("ip", "netns", "del", l.hub()).Run()
	})
	l.ip("netns", "add", l.hub())
	for _, br := range []string{"bra", "brb"} {
		l.ip("-n", l.hub(), "link", "add", br, "type", "bridge")
		l.ip("-n", l.hub(), "link", "set", br, "up")
	}
	l.ip("-n", l.hub(), "link", "add", "ab0", "type", "veth", "peer", "name", "ab1")
	l.ip("-n", l.hub(), "link", "set", "ab0", "master", "bra", "up")
	l.ip("-n", l.hub(), "link", "set", "ab1", "master", "brb", "up")
	for i := 1; i <= 5; i++ {
		ns := l.ns(i)
		l.ip("netns", "add", ns)
		l.ip("-n", ns, "link", "set", "lo", "up")
		l.ip("link", "add", "d0", "netns", ns, "type", "veth", "peer", "name", fmt.Sprintf("h%d", i), "netns", l.hub())
		br := "bra"
		if i > 3 {
			br = "brb"
		}
		l.ip("-n", l.hub(), "link", "set", fmt.Sprintf("h%d", i), "master", br, "up")
		l.ip("-n", ns, "addr", "add", fmt.Sprintf("10.77.0.%d/24", i), "dev", "d0")
		l.ip("-n", ns, "link", "set", "d0", "up")
		mgmt := fmt.Sprintf("%sm%d", l.prefix, i)
		l.ip("link", "add", mgmt, "type", "veth", "peer", "name", "m0", "netns", ns)
		l.ip("addr", "add", fmt.Sprintf("10.88.%d.1/30", i), "dev", mgmt)
		l.ip("link", "set", mgmt, "up")
		l.ip("-n", ns, "addr", "add", fmt.Sprintf("10.88.%d.2/30", i), "dev", "m0")
		l.ip("-n", ns, "link", "set", "m0", "up")
	}
	return l
}

// split takes the link between the bridges down (up to heal).
func (l netLab) split(down bool) {
	state := "up"
	if down {
		state = "down"
	}
	l.ip("-n", l.hub(), "link", "set", "ab0", state)
}

// A 3 + 2 split in network namespaces: the minority side sees a suspected
// partition and refuses the quorum write, the majority keeps acting; after
// healing both sides converge and the former minority acts again.
func TestMeshPartitionQuorum(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespaces and five processes")
	}
	lab := newNetLab(t)
	const hb = 500 * time.Millisecond
	bin := buildBinary(t, "")
	dir := meshDir(t)
	writeFile(t, dir, "policy.yml", fmt.Sprintf(partitionPolicy, sha256.Sum256([]byte(meshToken))))
	base := make([]string, 6)
	for i := 1; i <= 5; i++ {
		mf := writeFile(t, dir, fmt.Sprintf("node_%d.manifest.yml", i), partitionManifest(i, hb))
		log := &serveLogBuffer{}
		cmd := exec.Command("ip", "netns", "exec", lab.ns(i), bin, "serve", "--manifest", mf, "--policy", filepath.Join(dir, "policy.yml"),
			"--simulate", "--http", "0.0.0.0:8765", "--allow-remote")
		cmd.Stderr = log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
			if t.Failed() {
				t.Logf("node_%d:\n%s", i, log.String())
			}
		})
		base[i] = fmt.Sprintf("http://10.88.%d.2:8765", i)
	}
	status := func(i int) mesh.Status {
		var st mesh.Status
		c := rpcClient{url: base[i] + "/mcp", token: meshToken, http: &http.Client{Timeout: 3 * time.Second}}
		if err := c.call("physmcp/mesh_status", &st); err != nil {
			return mesh.Status{}
		}
		return st
	}
	alive := func(i int) int {
		lp := listPeers{}
		c := rpcClient{url: base[i] + "/mcp", token: meshToken, http: &http.Client{Timeout: 3 * time.Second}}
		if c.call("physmcp/list_peers", &lp) != nil {
			return -1
		}
		return alivePeers(lp)
	}
	waitFor := func(what string, limit time.Duration, ok func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !ok() {
			if time.Since(start) > limit {
				t.Fatalf("%s: not within %v", what, limit)
			}
			time.Sleep(100 * time.Millisecond)
		}
		return time.Since(start)
	}
	all := func(want func(i int) bool) func() bool {
		return func() bool {
			for i := 1; i <= 5; i++ {
				if !want(i) {
					return false
				}
			}
			return true
		}
	}
	took := waitFor("five nodes see four alive peers each", 60*time.Second, all(func(i int) bool { return alive(i) == 4 }))
	t.Logf("converged in %v after start", took.Round(time.Millisecond))

	key := 0
	valve := func(i int) (status, permission, reason string) {
		key++
		c := httpClient(t, base[i], meshToken)
		defer c.Close()
		r := answer(t, c, "do_valve", map[string]any{"value": key%2 == 1, "idempotency_key": fmt.Sprintf("k-%d", key)})
		s, _ := r["status"].(string)
		p, _ := r["permission"].(string)
		why, _ := r["reason"].(string)
		return s, p, why
	}
	if s, p, why := valve(4); s != "success" {
		t.Fatalf("before the split, node_4's quorum write: %s %s %s", s, p, why)
	}

	lab.split(true)
	split := time.Now()
	waitFor("both sides see the split", 30*time.Second, all(func(i int) bool {
		want := 2
		if i > 3 {
			want = 1
		}
		return alive(i) == want
	}))
	t.Logf("sides separated %v after the link went down", time.Since(split).Round(time.Millisecond))
	for _, i := range []int{4, 5} {
		st := status(i)
		if st.Partition.State != mesh.PartitionSuspected || !st.Partition.Minority() {
			t.Errorf("node_%d (minority) partition %+v; want suspected, minority", i, st.Partition)
		}
		if s, p, why := valve(i); s != "failed" || p != "partition_no_quorum" {
			t.Errorf("node_%d (minority) quorum write: %s %s %q; want failed partition_no_quorum", i, s, p, why)
		} else {
			t.Logf("node_%d refused: %s", i, why)
		}
	}
	for _, i := range []int{1, 2, 3} {
		if s, p, why := valve(i); s != "success" {
			t.Errorf("node_%d (majority) quorum write: %s %s %q; want success", i, s, p, why)
		}
	}

	lab.split(false)
	healed := time.Now()
	took = waitFor("the sides converge after healing", 60*time.Second, all(func(i int) bool { return alive(i) == 4 }))
	t.Logf("converged %v after healing", took.Round(time.Millisecond))
	fmt.Printf("mesh partition: minority refused, majority acted; converged %v after healing\n", time.Since(healed).Round(time.Millisecond))
	if s, p, why := valve(4); s != "success" {
		t.Fatalf("after healing, node_4's quorum write: %s %s %q", s, p, why)
	}
}
