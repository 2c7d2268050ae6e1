package engine_test

import (
	"context"
	"testing"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/promcp"
)

// withAuditAll binds a new engine whose policy says defaults.audit_all: on.
func withAuditAll(t *testing.T, r *rig, on bool, sink *auditSink) *engine.Engine {
	t.Helper()
	p := *r.e.Policy()
	d := policy.Defaults{}
	if p.Defaults != nil {
		d = *p.Defaults
	}
	d.AuditAll = on
	p.Defaults = &d
	e, err := engine.New(r.e.Manifest(), &p, r.buses, engine.Options{Audit: sink.add, Now: r.clock.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestAuditAllPutsReadsInTheTrail(t *testing.T) {
	for _, on := range []bool{false, true} {
		r := newRig(t)
		var sink auditSink
		e := withAuditAll(t, r, on, &sink)
		resp, err := e.Read(context.Background(), operator, "read_water_temperature")
		if err != nil {
			t.Fatal(err)
		}
		if !on {
			if len(sink.entries) != 0 {
				t.Fatalf("audit_all off: reads audited: %+v", sink.entries)
			}
			continue
		}
		if len(sink.entries) != 1 {
			t.Fatalf("audit_all on: %d entries, want 1: %+v", len(sink.entries), sink.entries)
		}
		got := sink.entries[0]
		if got.Outcome != engine.OutcomeRead || got.Tool != "read_water_temperature" || got.Caller != operator.Identity ||
			got.Role != operator.Role || got.Quality != string(resp.Quality) || got.Applied != resp.Value {
			t.Errorf("entry = %+v, read answered %+v", got, resp)
		}
	}
}

// A call the HTTP edge refused for the caller's role never reaches the
// engine. A do_* is audited as refused all the same, with its value and
// idempotency_key; a read_* only under audit_all. Arguments that did not
// decode (nil) still give the do_* its line.
func TestNoteRefusedAuditsEdgeRefusals(t *testing.T) {
	for _, on := range []bool{false, true} {
		r := newRig(t)
		var sink auditSink
		e := withAuditAll(t, r, on, &sink)
		e.NoteRefused(viewer, "read_water_temperature", promcp.PermissionInsufficient, "role none may not call read_water_temperature", nil)
		e.NoteRefused(viewer, "do_boiler_setpoint", promcp.PermissionInsufficient, "role none may not call do_boiler_setpoint",
			map[string]any{"value": 50.0, "idempotency_key": "k-viewer"})
		e.NoteRefused(viewer, "do_boiler_setpoint", promcp.PermissionInsufficient, "role none may not call do_boiler_setpoint", nil)
		entries := sink.entries
		if on {
			if len(entries) != 3 {
				t.Fatalf("audit_all on: %d entries, want 3: %+v", len(entries), entries)
			}
			got := entries[0]
			if got.Outcome != engine.OutcomeRefused || got.Tool != "read_water_temperature" || got.Caller != viewer.Identity ||
				got.Role != viewer.Role || got.Quality != string(promcp.QualityError) || got.Reason != "permission_insufficient: role none may not call read_water_temperature" {
				t.Errorf("read entry = %+v", got)
			}
			entries = entries[1:]
		}
		if len(entries) != 2 {
			t.Fatalf("audit_all %v: do_* entries %+v, want 2", on, entries)
		}
		for i, want := range []struct {
			key   string
			value any
		}{{"k-viewer", 50.0}, {"", nil}} {
			got := entries[i]
			if got.Outcome != engine.OutcomeRefused || got.Tool != "do_boiler_setpoint" || got.Caller != viewer.Identity || got.Role != viewer.Role ||
				got.Status != promcp.StatusFailed || got.Permission != promcp.PermissionInsufficient || got.Reason != "role none may not call do_boiler_setpoint" ||
				got.Key != want.key || got.Arguments["idempotency_key"] != want.key || got.Arguments["value"] != want.value {
				t.Errorf("do entry %d = %+v", i, got)
			}
		}
	}
}
