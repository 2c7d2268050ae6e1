package mcpcore

import (
	"fmt"
	"strings"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// Instructions is what the server tells a client at initialize: which device
// this is and the proMCP loop to follow for every change.
func Instructions(m *manifest.Manifest) string {
	var b strings.Builder
	d := m.Device
	fmt.Fprintf(&b, "This server is physical device %s (type %s", d.ID, d.Type)
	if maker := strings.TrimSpace(d.Vendor + " " + d.Model); maker != "" {
		fmt.Fprintf(&b, ", %s", maker)
	}
	b.WriteString(")")
	if loc := d.Location; loc != nil {
		fmt.Fprintf(&b, " in zone %s", loc.Zone)
		if loc.Area != "" {
			fmt.Fprintf(&b, ", area %s", loc.Area)
		}
		if loc.Description != "" {
			fmt.Fprintf(&b, " (%s)", loc.Description)
		}
	}
	fmt.Fprintf(&b, ". It follows proMCP (promcp_base %s) with the PhysMCP %s extension.\n", promcp.BaseVersion, m.PhysMCPVersion)
	// What the read_* and do_* answers' fields mean is said here, once,
	// not in every tool's output schema.
	b.WriteString(`Tools: read_* observe and never change anything (safe in parallel; each answer carries value, unit, ` +
		`timestamp: when the value was measured, not when it was served, and quality: good = fresh and reliable, ` +
		`stale = older than its cache TTL with nothing fresher available, degraded = the source answers but the value is ` +
		`implausible, error = no usable value; detail says why quality is not good). do_* change the physical world ` +
		`(idempotent through idempotency_key; each answer carries status: success = applied as asked, partial = applied ` +
		`with a change (see applied_value and warnings), failed = nothing was written (see permission and reason); ` +
		`applied_value, previous_value, side_effects, compensable and compensation_hint, the call that undoes it). ` +
		`device_id names the device that measured or acted (source: the device this one adopts it from). ` +
		`can_do checks an intent without acting.
For every change follow this loop:
1. can_do with intent {semantic_tags, action, target, value}. Act only on a candidate whose permission is allowed, ` +
		`before its valid_until. Confidence below 0.7 means confirm with a person first. Blocked and unroutable entries say why not.
2. read_* the related reads the report lists, in parallel. Do not act on degraded or error readings.
3. do_* with a new idempotency_key. If the answer is lost or times out, retry with the same key: it never acts twice.
4. read_* again to verify the device reached the new state. If it did not, or the reading is degraded, stop and tell a person; ` +
		`compensation_hint names the call that undoes the change.`)
	return b.String()
}
