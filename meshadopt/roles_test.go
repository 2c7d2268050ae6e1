package meshadopt_test

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/meshadopt"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/promcp"
)

const fan, temp = "do_greenhouse_controller_01_vent_fan", "read_greenhouse_controller_01_air_temperature"

// The aggregator asks of its own callers at least the roles the device asks
// of its callers, since the device sees the mesh role it gives the
// aggregator, never theirs. A device whose do_vent_fan needs a supervisor
// (and whose air temperature an operator), and which gives the mesh role
// supervisor so that the aggregator can adopt it: an operator is refused at
// the aggregator, nothing sent to the device; a viewer cannot read the
// temperature there; can_do does not offer the write to an operator; a
// supervisor passes. Before, adopted do_* needed operator and reads
// nothing, whatever the device asked: an operator's write reached the
// device as the mesh role's.
func TestAggregatorAsksTheRolesTheDeviceAsks(t *testing.T) {
	agg, dev := adoptGreenhouse(t, `identity: {mesh: {role: supervisor}}`, func(c *manifest.Capability) {
		switch c.ToolName() {
		case "do_vent_fan":
			c.RequiresPermission = manifest.RoleSupervisor
		case "read_air_temperature":
			c.RequiresPermission = manifest.RoleOperator
		}
	})
	ctx := context.Background()
	op := engine.Caller{Identity: "op", Role: manifest.RoleOperator}
	if r, err := agg.Do(ctx, op, fan, promcp.DoRequest{Value: true, IdempotencyKey: "k-op"}); err != nil || r.Permission != promcp.PermissionInsufficient {
		t.Errorf("an operator's %s: %+v %v; want permission_insufficient at the aggregator", fan, r, err)
	}
	if n, _ := calls(dev, "do_vent_fan"); n != 0 {
		t.Errorf("%d calls of do_vent_fan reached the device for an operator it refuses", n)
	}
	if agg.Permits(fan, manifest.RoleOperator) || !agg.Permits(fan, manifest.RoleSupervisor) {
		t.Errorf("the aggregator lets an operator call %s (%v), or not a supervisor (%v)", fan, agg.Permits(fan, manifest.RoleOperator), agg.Permits(fan, manifest.RoleSupervisor))
	}
	if agg.Permits(temp, manifest.RoleViewer) || !agg.Permits(temp, manifest.RoleOperator) {
		t.Errorf("the aggregator lets a viewer read %s (%v), or not an operator (%v)", temp, agg.Permits(temp, manifest.RoleViewer), agg.Permits(temp, manifest.RoleOperator))
	}
	intent := promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"fan"}, Action: "set", Value: true}}
	if rep := answeredCanDo(t, agg, op, intent); slices.ContainsFunc(rep.Candidates, func(c promcp.Candidate) bool { return c.Capability == fan }) {
		t.Errorf("can_do offers %s to an operator: %+v", fan, rep.Candidates)
	}

	sup := engine.Caller{Identity: "sup", Role: manifest.RoleSupervisor}
	rep := answeredCanDo(t, agg, sup, intent)
	if i := slices.IndexFunc(rep.Candidates, func(c promcp.Candidate) bool { return c.Capability == fan }); i < 0 || rep.Candidates[i].Constraints.MinRole != string(manifest.RoleSupervisor) {
		t.Errorf("can_do for a supervisor: %+v; want %s with min_role supervisor", rep, fan)
	}
	if r, err := agg.Do(ctx, sup, fan, promcp.DoRequest{Value: true, IdempotencyKey: "k-sup"}); err != nil || r.Status != promcp.StatusSuccess {
		t.Errorf("a supervisor's %s: %+v %v", fan, r, err)
	}
	if n, _ := calls(dev, "do_vent_fan"); n != 1 {
		t.Errorf("%d calls of do_vent_fan reached the device, want 1 (the supervisor's)", n)
	}
}

// A device that admits only some roles ([operator, admin], not supervisor)
// and gives the mesh role admin: the aggregator admits the same roles, so a
// supervisor is refused there (the device would take the call as admin's).
func TestAggregatorAdmitsOnlyTheRolesTheDeviceAdmits(t *testing.T) {
	agg, dev := adoptGreenhouse(t, `identity: {mesh: {role: admin}}
capabilities:
  do_vent_fan:
    rules: [{type: permission, require: [operator, admin]}]
`, nil)
	ctx := context.Background()
	sup := engine.Caller{Identity: "sup", Role: manifest.RoleSupervisor}
	if r, err := agg.Do(ctx, sup, fan, promcp.DoRequest{Value: true, IdempotencyKey: "k-sup"}); err != nil || r.Permission != promcp.PermissionInsufficient {
		t.Errorf("a supervisor's %s: %+v %v; want permission_insufficient at the aggregator", fan, r, err)
	}
	if n, _ := calls(dev, "do_vent_fan"); n != 0 {
		t.Errorf("%d calls of do_vent_fan reached the device for a supervisor it refuses", n)
	}
	for role, want := range map[manifest.Role]bool{manifest.RoleOperator: true, manifest.RoleSupervisor: false, manifest.RoleAdmin: true} {
		if got := agg.Permits(fan, role); got != want {
			t.Errorf("the aggregator lets %s call %s: %v, want %v", role, fan, got, want)
		}
	}
	op := engine.Caller{Identity: "op", Role: manifest.RoleOperator}
	if r, err := agg.Do(ctx, op, fan, promcp.DoRequest{Value: true, IdempotencyKey: "k-op"}); err != nil || r.Status != promcp.StatusSuccess {
		t.Errorf("an operator's %s: %+v %v", fan, r, err)
	}
}

// adoptGreenhouse serves the examples/mesh greenhouse controller under the
// policy text (edit, when not nil, changes its capabilities first) and
// returns the mesh aggregator that adopted it, and the device's engine.
func adoptGreenhouse(t *testing.T, devicePolicy string, edit func(*manifest.Capability)) (*engine.Engine, *engine.Engine) {
	t.Helper()
	key := make([]byte, 32)
	rand.Read(key)
	keys := [][]byte{key}
	dm, _ := load(t, "../examples/mesh/greenhouse")
	if edit != nil {
		for _, c := range dm.Capabilities {
			edit(c)
		}
	}
	dp, diags := policy.Parse("device.policy.yml", []byte("physmcp_policy_version: \"0.1\"\n"+devicePolicy), dm)
	if dp == nil || diags.HasErrors() {
		t.Fatal(diags)
	}
	url, dev := serveDevice(t, dm, dp, keys, make(chan string))
	m, p := load(t, "../examples/site/mesh-aggregator")
	agg := simEngine(t, m, p)
	a, err := meshadopt.New(meshadopt.Config{Source: m.MeshSource(), Node: "site_mesh_aggregator_01", Keys: keys, Logger: quiet}, &members{peers: []mesh.Peer{{
		NodeID: "greenhouse_controller_01", DeviceID: "greenhouse_controller_01", Zone: "greenhouse_a", Profile: "full",
		Endpoint: url, CapsHash: "h", State: mesh.Alive, Since: time.Now()}}}, agg)
	if err != nil {
		t.Fatal(err)
	}
	a.Sync(context.Background())
	if _, ok := served(agg)[fan]; !ok {
		t.Fatalf("%s is not served: %v", fan, served(agg))
	}
	return agg, dev
}

// A device restarted at the same endpoint with a policy that asks more of
// its do_vent_fan (supervisor, where the manifest says operator) announces
// another capabilities hash, so the aggregator lists its tools again and
// refuses an operator from then on. Before, the hash covered the manifest
// alone: unchanged, the aggregator kept the roles it had listed, and the
// operator's write reached the restarted device as the mesh role's.
func TestRestartedDeviceWithStricterRolesIsListedAgain(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key)
	keys := [][]byte{key}
	serve := func(policyText string) (*url.URL, *engine.Engine, string) {
		dm, _ := load(t, "../examples/mesh/greenhouse")
		dp, diags := policy.Parse("device.policy.yml", []byte("physmcp_policy_version: \"0.1\"\nidentity: {mesh: {role: supervisor}}\n"+policyText), dm)
		if dp == nil || diags.HasErrors() {
			t.Fatal(diags)
		}
		raw, dev := serveDevice(t, dm, dp, keys, make(chan string))
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return u, dev, mesh.Describe(dm, "full", dev.Roles).CapsHash
	}
	before, _, hashBefore := serve("")
	var backend atomic.Pointer[httputil.ReverseProxy]
	to := func(u *url.URL) {
		backend.Store(httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host}))
	}
	to(before)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { backend.Load().ServeHTTP(w, r) }))
	t.Cleanup(front.Close)

	m, p := load(t, "../examples/site/mesh-aggregator")
	agg := simEngine(t, m, p)
	peer := mesh.Peer{NodeID: "greenhouse_controller_01", DeviceID: "greenhouse_controller_01", Zone: "greenhouse_a", Profile: "full",
		Endpoint: front.URL + before.Path, CapsHash: hashBefore, State: mesh.Alive, Since: time.Now()}
	membership := &members{peers: []mesh.Peer{peer}}
	a, err := meshadopt.New(meshadopt.Config{Source: m.MeshSource(), Node: "site_mesh_aggregator_01", Keys: keys, Retry: time.Millisecond, Logger: quiet}, membership, agg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a.Sync(ctx)
	if !agg.Permits(fan, manifest.RoleOperator) {
		t.Fatalf("before the restart an operator may not call %s", fan)
	}

	// the restart: the same endpoint, a stricter policy
	after, restarted, hashAfter := serve(`capabilities:
  do_vent_fan:
    rules: [{type: permission, require: [supervisor, admin]}]
`)
	to(after)
	if hashAfter == hashBefore {
		t.Errorf("the capabilities hash %s is the same under the stricter policy", hashAfter)
	}
	peer.CapsHash = hashAfter
	membership.set(peer)
	// The first listing may meet the old session (gone with the restart)
	// and is tried again after Retry.
	for deadline := time.Now().Add(10 * time.Second); agg.Permits(fan, manifest.RoleOperator) && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		a.Sync(ctx)
	}
	op := engine.Caller{Identity: "op", Role: manifest.RoleOperator}
	if r, err := agg.Do(ctx, op, fan, promcp.DoRequest{Value: true, IdempotencyKey: "k-op"}); err != nil || r.Permission != promcp.PermissionInsufficient {
		t.Errorf("an operator's %s after the restart: %+v %v; want permission_insufficient at the aggregator", fan, r, err)
	}
	if n, _ := calls(restarted, "do_vent_fan"); n != 0 {
		t.Errorf("%d calls of do_vent_fan reached the restarted device for an operator it refuses", n)
	}
}
