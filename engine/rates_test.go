package engine_test

import (
	"testing"
	"time"

	"github.com/physmcp/physmcpd/promcp"
)

// The policy's default rate limit applies to every do tool, on top of the
// manifest's own limits.
func TestPolicyDefaultRateApplies(t *testing.T) {
	r := newRigFiles(t, "testdata/device.manifest.yml", "testdata/defaults.policy.yml")
	if resp := r.do(t, operator, "do_damper_position", 30.0, "first"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("first write: %+v", resp)
	}
	if resp := r.do(t, operator, "do_damper_position", 31.0, "second"); resp.Permission != promcp.RateLimited {
		t.Fatalf("second write within the hour: %+v", resp)
	}
	// do_boiler_setpoint has its own 3/minute; the default 1/hour still binds.
	r.do(t, operator, "do_boiler_setpoint", 50.0, "boiler-1")
	r.clock.Advance(11 * time.Second)
	if resp := r.do(t, operator, "do_boiler_setpoint", 51.0, "boiler-2"); resp.Permission != promcp.RateLimited {
		t.Fatalf("second boiler write: %+v", resp)
	}
}
