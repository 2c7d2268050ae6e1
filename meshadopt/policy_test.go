package meshadopt_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/adopt"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/syncbuf"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/meshadopt"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/promcp"
)

// The aggregator's policy names tools it adopts from the mesh, by pattern
// and by tool name, and every rule applies to them there, before the
// device's policy: a permission rule on do_*_vent_fan refuses an operator
// (audited, nothing sent to the device) and lets a supervisor through, its
// rate rule refuses the second write (the device sees one), and an adopted
// tool the rules cannot hold for (a range guard on a bool) is not served,
// blocked with the reason. Names that match no tool yet are logged and
// listed, at start-up and after each adoption.
func TestAggregatorPolicyAppliesToAdoptedTools(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key)
	keys := [][]byte{key}
	peers, devices := twoGreenhouses(t, keys)
	m, _ := load(t, "../examples/site/mesh-aggregator")
	text, err := os.ReadFile("../examples/site/mesh-aggregator/physmcp.policy.yml")
	if err != nil {
		t.Fatal(err)
	}
	const gh1, gh2 = "do_greenhouse_controller_01_vent_fan", "do_greenhouse_controller_02_vent_fan"
	p, diags := policy.Parse("agg.policy.yml", append(text, `
capabilities:
  "do_*_vent_fan":
    rules:
      - {type: permission, require: [supervisor]}
      - {type: rate, max: 1/hour}
  do_greenhouse_controller_02_vent_fan:
    rules:
      - {type: range_guard, max: 1, on_violation: deny}
  read_greenhouse_controller_03_air_temperature:
    rules:
      - {type: permission, require: [admin]}
`...), m)
	if p == nil || len(diags) != 0 {
		t.Fatalf("the aggregator's policy: %v", diags)
	}
	var log syncbuf.Buffer
	var audit []engine.AuditEntry
	var auditMu sync.Mutex
	buses, err := drivers.OpenAll(context.Background(), m, drivers.Openers{manifest.BusMCP: adopt.Open}, sim.Open, false)
	if err != nil {
		t.Fatal(err)
	}
	agg, err := engine.New(m, p, buses, engine.Options{Logger: slog.New(slog.NewTextHandler(&log, nil)), Audit: func(a engine.AuditEntry) {
		auditMu.Lock()
		audit = append(audit, a)
		auditMu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agg.Close() })
	pending := []string{"do_*_vent_fan", "do_greenhouse_controller_02_vent_fan", "read_greenhouse_controller_03_air_temperature"}
	if got := agg.PolicyUnmatched(); !slices.Equal(got, pending) {
		t.Errorf("at start-up: unmatched %q, want %q", got, pending)
	}
	n := bytes.Count(text, []byte("\n")) // the lines before the capabilities added above
	for i, line := range []int{n + 3, n + 7, n + 10} {
		want := fmt.Sprintf(`msg="policy name that applies to no tool offered yet (checked when a source offers one)" at=agg.policy.yml:%d:3 field=capabilities.%s`, line, pending[i])
		if !strings.Contains(log.String(), want) {
			t.Errorf("the start-up log does not name %s where the policy gives it (%s):\n%s", pending[i], want, log.String())
		}
	}

	a, err := meshadopt.New(meshadopt.Config{Source: m.MeshSource(), Node: "site_mesh_aggregator_01", Keys: keys, Logger: quiet}, &members{peers: []mesh.Peer{
		peers["greenhouse_controller_01"], peers["greenhouse_controller_02"]}}, agg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a.Sync(ctx)
	if got, want := agg.PolicyUnmatched(), pending[2:]; !slices.Equal(got, want) {
		t.Errorf("both devices adopted: unmatched %q, want %q", got, want)
	}
	got := served(agg)
	if _, ok := got[gh1]; !ok {
		t.Fatalf("%s is not served: %v", gh1, got)
	}
	if _, ok := got[gh2]; ok {
		t.Errorf("%s is served, though a range guard cannot hold for a bool", gh2)
	}

	// The policy's permission rule: an operator is refused at the aggregator, audited.
	op := engine.Caller{Identity: "op", Role: manifest.RoleOperator}
	r, err := agg.Do(ctx, op, gh1, promcp.DoRequest{Value: true, IdempotencyKey: "k-op"})
	if err != nil || r.Permission != promcp.PermissionInsufficient || !strings.Contains(r.Reason, "only to roles supervisor") {
		t.Fatalf("an operator: %+v %v; want refused by the aggregator's policy", r, err)
	}
	auditMu.Lock()
	refused := slices.ContainsFunc(audit, func(a engine.AuditEntry) bool {
		return a.Tool == gh1 && a.Caller == "op" && a.Outcome == "refused" && a.Permission == promcp.PermissionInsufficient
	})
	auditMu.Unlock()
	if !refused {
		t.Errorf("no audit line for the refused operator: %+v", audit)
	}
	if n, _ := calls(devices["greenhouse_controller_01"], "do_vent_fan"); n != 0 {
		t.Errorf("%d calls reached the device after the aggregator refused", n)
	}

	// A supervisor is let through; a second write within the hour is refused by the pattern's rate rule.
	sup := engine.Caller{Identity: "sup", Role: manifest.RoleSupervisor}
	if r, err := agg.Do(ctx, sup, gh1, promcp.DoRequest{Value: true, IdempotencyKey: "k-sup-1"}); err != nil || r.Status != promcp.StatusSuccess {
		t.Fatalf("a supervisor: %+v %v", r, err)
	}
	r, err = agg.Do(ctx, sup, gh1, promcp.DoRequest{Value: false, IdempotencyKey: "k-sup-2"})
	if err != nil || r.Permission != promcp.RateLimited || !strings.Contains(r.Reason, "rate limit 1/hour") {
		t.Errorf("a second write: %+v %v; want rate_limited by the aggregator's policy", r, err)
	}
	if n, _ := calls(devices["greenhouse_controller_01"], "do_vent_fan"); n != 1 {
		t.Errorf("%d calls reached the device, want 1", n)
	}

	// The tool the rules cannot hold for is blocked, with the file, line and field.
	rep := answeredCanDo(t, agg, sup, promcp.CanDoRequest{Intent: promcp.Intent{SemanticTags: []string{"fan"}, Action: "set", Value: true}})
	i := slices.IndexFunc(rep.Blocked, func(b promcp.Blocked) bool { return b.Capability == gh2 })
	want := "policy_mismatch: " + gh2 + " of devices/greenhouse_controller_02 is not served: the policy's rules for it cannot hold for it: agg.policy.yml:"
	if i < 0 || rep.Blocked[i].Permission != promcp.NotServed || !strings.HasPrefix(rep.Blocked[i].Reason, want) ||
		!strings.Contains(rep.Blocked[i].Reason, "capabilities.do_greenhouse_controller_02_vent_fan.rules[0]: a range_guard only applies to numeric tools") {
		t.Errorf("can_do blocked %+v (candidates %+v); want %s blocked: %q...", rep.Blocked, rep.Candidates, gh2, want)
	}
}
