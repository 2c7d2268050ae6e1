// Package profiles holds the deployment profiles as data: what each one
// serves (tool kinds, transports, disk state) and the limits it runs under.
// Full is for boards with memory to spare; Lite (PhysMCP read-only telemetry)
// is for the smallest boards and for nodes a proxy adopts over a serial line.
package profiles

import (
	"fmt"
	"strings"

	"github.com/physmcp/physmcpd/manifest"
)

// Transport is a way of serving MCP.
type Transport string

const (
	Stdio  Transport = "stdio"
	Serial Transport = "serial"
	HTTP   Transport = "http"
)

// Profile is what one profile enables and the limits it runs under. A zero
// limit means "no limit of the profile's own" (the transport's default).
type Profile struct {
	Name    string
	Summary string
	// DoTools: do_* tools are served. Without them nothing is ever written to
	// a device: do_ capabilities are not even bound, so no output line is
	// requested and no register is touched.
	DoTools bool
	// Transports the profile may serve on.
	Transports []Transport
	// DiskWrites: the profile may keep state on disk (--state-dir: the
	// idempotency store and the audit trail).
	DiskWrites bool
	// MaxCapabilities bounds the manifest's size (and with it every per-point
	// cache, which holds one reading per capability).
	MaxCapabilities int
	// Workers is how many tool calls run at once per session; Queue how many
	// more may wait. Calls beyond that wait for the reader, not in memory.
	Workers, Queue int
	// MaxMessageBytes is the longest JSON-RPC message accepted on a stream
	// transport; a longer one ends the session instead of growing a buffer.
	MaxMessageBytes int
	// GCPercent is the collector's GOGC: how far the heap may grow past the
	// live data before the next collection (0: Go's default, 100). A lower
	// one keeps the heap nearer the live data at a cost proportional to what
	// is allocated. It is not a memory limit: those make the collector run
	// back to back once the process nears them, and Lite's memory is bounded
	// by its structures instead (MaxCapabilities, Workers, Queue,
	// MaxMessageBytes); bench/footprint.sh measures both.
	GCPercent int
	// MaxProcs is GOMAXPROCS, the goroutines running Go code at once (0:
	// one per core). Each holds its own allocation caches, so on a board
	// with cores to spare a profile that is short of memory keeps it at one.
	MaxProcs int
}

// Full serves every tool kind on every transport, keeps state on disk and
// leaves the transports' own limits in place.
var Full = Profile{
	Name:       "full",
	Summary:    "read_*, do_* and can_do; stdio, serial or streamable HTTP; persistent state and audit",
	DoTools:    true,
	Transports: []Transport{Stdio, Serial, HTTP},
	DiskWrites: true,
}

// Lite is read-only telemetry for the smallest boards.
var Lite = Profile{
	Name:            "lite",
	Summary:         "read_* and can_do only; stdio or a serial line; nothing written to disk; bounded memory",
	DoTools:         false,
	Transports:      []Transport{Stdio, Serial},
	DiskWrites:      false,
	MaxCapabilities: 128,
	Workers:         2,
	Queue:           8,
	MaxMessageBytes: 64 << 10,
	GCPercent:       25,
	MaxProcs:        1,
}

// Proxy is a Full node that also adopts other devices' capabilities (mcp
// buses: a Lite node on a serial line, any MCP server on stdio or HTTP) and
// serves them as its own, under its own policy, cooldowns and audit.
var Proxy = Profile{
	Name:       "proxy",
	Summary:    "full, with capabilities adopted from other MCP servers (a Lite node on a serial line, stdio or HTTP)",
	DoTools:    true,
	Transports: []Transport{Stdio, Serial, HTTP},
	DiskWrites: true,
}

// Aggregator is one HTTP endpoint for a site: it adopts every tool of a
// list of devices and serves them in groups (/mcp/<group>), with one can_do
// over all of them and do_* routed to the owning device.
var Aggregator = Profile{
	Name:       "aggregator",
	Summary:    "one streamable HTTP endpoint per group for a whole site's devices, adopted over MCP; site-wide can_do",
	DoTools:    true,
	Transports: []Transport{HTTP},
	DiskWrites: true,
}

// All lists the profiles this binary serves, the default first: Full and
// Lite, or Lite alone in the Lite build (-tags lite), which has no HTTP
// server, authentication or disk state to serve Full with.
func All() []Profile { return built }

// Lookup returns the profile called name.
func Lookup(name string) (Profile, error) {
	for _, p := range All() {
		if p.Name == name {
			return p, nil
		}
	}
	if name == Full.Name {
		return Profile{}, fmt.Errorf("this is the lite build of physmcpd, which serves the lite profile only "+
			"(read_* and can_do on stdio or a serial line): the %s profile needs the full build (physmcpd-TARGET, not physmcpd-lite-TARGET)", name)
	}
	return Profile{}, fmt.Errorf("unknown profile %q: want %s", name, names())
}

func names() string {
	var n []string
	for _, p := range All() {
		n = append(n, p.Name)
	}
	if len(n) < 2 {
		return strings.Join(n, "")
	}
	return strings.Join(n[:len(n)-1], ", ") + " or " + n[len(n)-1]
}

// Resolve picks the profile: the command line's choice when given, else the
// manifest's, else the build's default (Full, or Lite in the Lite build).
func Resolve(flagValue string, m *manifest.Manifest) (Profile, error) {
	switch {
	case flagValue != "":
		return Lookup(flagValue)
	case m != nil && m.Profile != "":
		return Lookup(m.Profile)
	}
	return All()[0], nil
}

// Allows reports whether the profile may serve on t.
func (p Profile) Allows(t Transport) bool {
	for _, have := range p.Transports {
		if have == t {
			return true
		}
	}
	return false
}

// CheckTransport explains why the profile may not serve on t, or returns nil.
func (p Profile) CheckTransport(t Transport) error {
	if p.Allows(t) {
		return nil
	}
	allowed := make([]string, len(p.Transports))
	for i, have := range p.Transports {
		allowed[i] = string(have)
	}
	return fmt.Errorf("the %s profile does not serve %s (it serves %s)", p.Name, t, strings.Join(allowed, ", "))
}

// Apply returns the manifest as the profile serves it, and the tools it
// leaves out. m itself is not changed (the policy was checked against all of
// it). A manifest larger than the profile allows is an error, not a
// truncation: every configured capability is served or none is.
func (p Profile) Apply(m *manifest.Manifest) (*manifest.Manifest, []string, error) {
	if p.MaxCapabilities > 0 && len(m.Capabilities) > p.MaxCapabilities {
		return nil, nil, fmt.Errorf("the %s profile serves at most %d capabilities; %s declares %d",
			p.Name, p.MaxCapabilities, m.File, len(m.Capabilities))
	}
	if p.DoTools {
		return m, nil, nil
	}
	served := *m
	served.Capabilities = nil
	var hidden []string
	for _, c := range m.Capabilities {
		if c.Kind == manifest.KindDo {
			hidden = append(hidden, c.ToolName())
			continue
		}
		served.Capabilities = append(served.Capabilities, c)
	}
	// start_* and sequences act, so they go with the do_* tools.
	served.Operations = nil
	for _, o := range m.Operations {
		hidden = append(hidden, o.ToolNames()...)
	}
	return &served, hidden, nil
}
