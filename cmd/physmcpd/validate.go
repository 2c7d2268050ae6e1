package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/physmcp/physmcpd/internal/strictyaml"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/profiles"
)

func init() {
	register("validate", "check a manifest (and policy) and list the tools they expose", runValidate)
}

// runValidate exits 0 when the files are valid (printing the tools and any
// warnings), 1 when they are not (every error on stderr), 2 on usage errors.
func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	manifestPath := fs.String("manifest", "", "the device manifest (physmcp.manifest.yml); required")
	policyPath := fs.String("policy", "", "the policy (physmcp.policy.yml); optional")
	profileName := fs.String("profile", "", "check for this profile (full, lite, proxy or aggregator; default: the manifest's)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: physmcpd validate --manifest FILE [--policy FILE] [--profile NAME]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *manifestPath == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	if *profileName != "" {
		if _, err := profiles.Lookup(*profileName); err != nil {
			fmt.Fprintf(stderr, "physmcpd validate: --profile: %v\n", err)
			return 2
		}
	}
	m, diags := manifest.Load(*manifestPath)
	var p *policy.Policy
	if m != nil && *policyPath != "" {
		var pd strictyaml.Diags
		p, pd = policy.Load(*policyPath, m)
		diags = append(diags, pd...)
	}
	diags = append(diags, identityFileDiags(p)...)
	diags = append(diags, meshKeyDiags(m)...)
	if diags.HasErrors() {
		fmt.Fprint(stderr, diags.String())
		if m == nil && *policyPath != "" {
			fmt.Fprintf(stderr, "%s: not checked: the manifest has errors\n", *policyPath)
		}
		return 1
	}
	summary(stdout, m, p)
	var tools []string
	for _, c := range m.Capabilities {
		tools = append(tools, c.ToolName())
	}
	if names := p.Unmatched(tools); len(names) > 0 {
		// adopted at run time: serve checks them against each tool adopted
		fmt.Fprintf(stdout, "\npolicy names for adopted tools, checked when a source offers them:\n")
		for _, x := range names {
			fmt.Fprintf(stdout, "  %s: %s\n", x.At, x.Field())
		}
	}
	if w := diags.Warnings(); len(w) > 0 {
		fmt.Fprintln(stdout)
		fmt.Fprint(stdout, w.String())
	}
	return profileNotes(stdout, stderr, *profileName, m)
}

// summary lists the tools the device will expose, one line each.
func summary(w io.Writer, m *manifest.Manifest, p *policy.Policy) {
	n := len(m.Capabilities)
	for _, c := range m.Capabilities {
		if c.Streamable {
			n++
		}
	}
	for _, o := range m.Operations {
		n += len(o.ToolNames())
	}
	fmt.Fprintf(w, "device %s (%s): %d tools + can_do\n\n", m.Device.ID, m.Device.Type, n)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tGROUP\tBUS\tTYPE\tUNIT\tRANGE\tGUARDS")
	for _, c := range m.Capabilities {
		bus := c.Binding.Bus
		if b := m.Bus(bus); b != nil && b.Simulated {
			bus += " (simulated)"
		}
		typ := string(c.DataType)
		if c.DataType == manifest.TypeEnum {
			typ += "{" + strings.Join(c.EnumValues, ",") + "}"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.ToolName(), dash(c.Group), bus, typ, dash(c.Unit), dash(c.Range.String()), dash(strings.Join(guards(c, p), ", ")))
		if c.Streamable {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.StreamTool(), dash(c.Group), bus, typ, dash(c.Unit), "-", fmt.Sprintf("every >= %s", c.MinUpdateInterval()))
		}
	}
	// operations act through other tools, whose guards apply to every write (docs/roadmap.md)
	for _, o := range m.Operations {
		via := "drives " + o.Drives
		if o.Kind == manifest.KindSequence {
			var steps []string
			for _, st := range o.Steps {
				steps = append(steps, st.Tool)
			}
			via = "steps " + strings.Join(steps, ", ")
		}
		for _, t := range o.ToolNames() {
			fmt.Fprintf(tw, "%s\t%s\t-\t%s\t-\t-\t%s\n", t, dash(o.Group), dash(o.Shape()), via)
		}
	}
	tw.Flush()
	sep := "\n"
	for _, name := range slices.Sorted(maps.Keys(m.Buses)) {
		if b := m.Buses[name]; b.MCP != nil && b.MCP.Adopt != nil {
			what := "every read_*"
			if b.MCP.Adopt.Tools == manifest.AdoptAll {
				what = "every tool"
			}
			if b.MCP.Mesh {
				group := "by " + b.MCP.Adopt.GroupBy
				if b.MCP.Adopt.Group != "" {
					group = b.MCP.Adopt.Group
				}
				fmt.Fprintf(w, "%sbus %s adopts %s of every device of the mesh while serve runs (group %s, named <verb>_%s)\n", sep, name, what, group,
					b.MCP.Adopt.CapabilityName("<device_id>", "<name>"))
			} else {
				fmt.Fprintf(w, "%sbus %s adopts %s of %s %s when serve starts (group %s, named <verb>_%s)\n", sep, name, what, b.MCP.Protocol(), b.MCP.Address(),
					dash(b.MCP.Adopt.Group), b.MCP.Adopt.CapabilityName(name, "<name>"))
			}
			sep = ""
		}
	}
}

// guards names everything that can stop or change a call to the tool.
func guards(c *manifest.Capability, p *policy.Policy) []string {
	var g []string
	if r := c.RequiresPermission; r != "" && r != manifest.RoleNone {
		g = append(g, "role>="+string(r))
	}
	if c.CooldownMs > 0 {
		g = append(g, fmt.Sprintf("cooldown %s", c.Cooldown()))
	}
	if c.RateLimit != nil {
		g = append(g, "rate "+c.RateLimit.Text)
	}
	if c.RequiresQuorum {
		g = append(g, fmt.Sprintf("quorum %d", c.QuorumSize))
	}
	for _, r := range p.Rules(c.ToolName()) {
		switch {
		case r.TimeWindow != nil:
			if len(r.TimeWindow.AllowDuring) > 0 {
				g = append(g, "only during "+strings.Join(r.TimeWindow.AllowDuring, "|"))
			}
			if len(r.TimeWindow.DenyDuring) > 0 {
				g = append(g, "not during "+strings.Join(r.TimeWindow.DenyDuring, "|"))
			}
		case r.Permission != nil:
			roles := make([]string, len(r.Permission.Require))
			for i, role := range r.Permission.Require {
				roles[i] = string(role)
			}
			g = append(g, "role in "+strings.Join(roles, "|"))
		case r.Rate != nil:
			g = append(g, "policy rate "+r.Rate.Max.Text)
		case r.Quorum != nil:
			g = append(g, fmt.Sprintf("quorum %d (%s)", r.Quorum.MinPeers, r.Quorum.OnFailure))
		case r.RangeGuard != nil:
			rg := manifest.Range{Min: r.RangeGuard.Min, Max: r.RangeGuard.Max}
			g = append(g, fmt.Sprintf("guard %s %s", rg.String(), r.RangeGuard.OnViolation))
		case r.Approval != nil:
			g = append(g, fmt.Sprintf("human approval (%ds)", r.Approval.TimeoutS))
		}
	}
	return g
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// profileNotes says what a profile chosen on the command line changes (the
// manifest's own profile key is checked, with positions, by manifest.Load).
func profileNotes(stdout, stderr io.Writer, name string, m *manifest.Manifest) int {
	if name == "" || name == m.Profile {
		return 0
	}
	prof, _ := profiles.Lookup(name)
	_, hidden, err := prof.Apply(m)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", m.File, err)
		return 1
	}
	if len(hidden) > 0 {
		fmt.Fprintln(stdout)
	}
	for _, tool := range hidden {
		fmt.Fprintf(stdout, "%s: note: the %s profile serves no do_ tools; %s will not be exposed\n", m.File, prof.Name, tool)
	}
	return 0
}

// identityFileDiags reports every identity file the policy names that
// serve could not read, at the line naming it: a missing key otherwise shows
// only when serve builds its HTTP access, after the safe state is applied.
// Relative paths are relative to the policy file, as auth reads them.
func identityFileDiags(p *policy.Policy) strictyaml.Diags {
	var diags strictyaml.Diags
	if p == nil || p.Identity == nil {
		return nil
	}
	for i, pr := range p.Identity.Providers {
		for _, f := range []struct{ key, path string }{{"key_file", pr.KeyFile}, {"ca_cert_path", pr.CACertPath}} {
			if f.path == "" {
				continue
			}
			path := f.path
			if !filepath.IsAbs(path) {
				path = filepath.Join(filepath.Dir(p.File), path)
			}
			if err := readableFile(path); err != nil {
				diags.Errorf(pr.At.Of(f.key), "identity.providers[%d].%s: %v; put the file there or correct the path "+
					"(a relative path is relative to the policy file; see docs/security.md)", i, f.key, err)
			}
		}
	}
	return diags
}

// readableFile says why path cannot serve as a key or certificate file.
func readableFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("cannot read %s: %w", path, errors.Unwrap(err))
	}
	defer f.Close()
	info, err := f.Stat()
	switch {
	case err != nil:
		return fmt.Errorf("cannot read %s: %w", path, err)
	case info.IsDir():
		return fmt.Errorf("%s is a directory, not a key or certificate file", path)
	case info.Size() == 0:
		return fmt.Errorf("%s is empty", path)
	}
	return nil
}
