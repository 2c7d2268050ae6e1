package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	pathpkg "path"
	"regexp"
	"slices"
	"strings"

	"github.com/physmcp/physmcpd/internal/strictyaml"
	"github.com/physmcp/physmcpd/manifest"
)

// Version is the policy version this physmcpd reads.
const Version = "0.1"

// Default timeout of a human_approval rule.
const DefaultApprovalTimeoutS = 120

var (
	// namePattern is what time window and quorum check names look like.
	namePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)
	sha256Hex   = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Parse decodes a policy and checks it against the manifest it governs.
// Every finding is returned at once, sorted; the policy is nil when any is an
// error. On success Capabilities is keyed by tool name and every time window
// is compiled.
func Parse(file string, data []byte, m *manifest.Manifest) (*Policy, strictyaml.Diags) {
	root, diags := strictyaml.Parse(file, data)
	if root == nil {
		return nil, diags
	}
	p := &Policy{File: file}
	d := strictyaml.NewDecoder(file, &diags)
	d.Decode(root, p, "")
	(&validator{d: d, p: p, m: m}).run()
	if m != nil {
		p.checked = make(map[*manifest.Capability]bool, len(m.Capabilities))
		for _, c := range m.Capabilities {
			p.checked[c] = true
		}
	}
	diags.Sort()
	if diags.HasErrors() {
		return nil, diags
	}
	return p, diags
}

// Load reads and parses the policy at path.
func Load(path string, m *manifest.Manifest) (*Policy, strictyaml.Diags) {
	data, err := os.ReadFile(path)
	if err != nil {
		var diags strictyaml.Diags
		diags.Errorf(strictyaml.Pos{File: path}, "cannot read the policy: %v", err)
		return nil, diags
	}
	return Parse(path, data, m)
}

// HashToken is how a static bearer token is stored: its SHA-256, in lowercase hex.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// QuorumCheck returns the quorum check of that name, or nil.
func (p *Policy) QuorumCheck(name string) *QuorumCheck {
	if p == nil {
		return nil
	}
	return p.QuorumChecks[name]
}

// DefaultRole is the role every tool requires unless it says otherwise (none by default).
func (p *Policy) DefaultRole() manifest.Role {
	if p == nil || p.Defaults == nil || p.Defaults.RequirePermission == "" {
		return manifest.RoleNone
	}
	return p.Defaults.RequirePermission
}

// LocalRole is the role of stdio callers (none by default).
func (p *Policy) LocalRole() manifest.Role {
	if p == nil || p.Identity == nil || p.Identity.LocalRole == "" {
		return manifest.RoleNone
	}
	return p.Identity.LocalRole
}

// SerialRole is the role of a peer on the serial line (viewer by default:
// read_* and can_do only, until the policy raises it deliberately).
func (p *Policy) SerialRole() manifest.Role {
	if p == nil || p.Identity == nil || p.Identity.SerialRole == "" {
		return manifest.RoleViewer
	}
	return p.Identity.SerialRole
}

type validator struct {
	d *strictyaml.Decoder
	p *Policy
	m *manifest.Manifest
	// usedWindows records which time windows some rule names.
	usedWindows map[string]bool
}

func (v *validator) errorf(pos strictyaml.Pos, path, format string, args ...any) {
	v.d.ErrorAt(pos, path, format, args...)
}

func (v *validator) warnf(pos strictyaml.Pos, path, format string, args ...any) {
	v.d.WarnAt(pos, path, format, args...)
}

func (v *validator) role(at Positions, path, key string, r manifest.Role) {
	if r != "" && !manifest.ValidRole(r) {
		v.errorf(at.Of(key), path, "unknown role %q; expected one of %s", r, manifest.RoleNames())
	}
}

func (v *validator) run() {
	p := v.p
	if p.Version != "" && p.Version != Version {
		v.errorf(p.At.Of("physmcp_policy_version"), "physmcp_policy_version", "unsupported version %q; this physmcpd reads %q", p.Version, Version)
	}
	if df := p.Defaults; df != nil {
		v.role(df.At, "defaults.require_permission", "require_permission", df.RequirePermission)
	}
	for _, name := range slices.Sorted(maps.Keys(p.TimeWindows)) {
		w := p.TimeWindows[name]
		w.Name = name
		path := "time_windows." + name
		if !namePattern.MatchString(name) {
			v.errorf(w.At.Key, path, "window name %q must be lowercase letters, digits, _ and - and start with a letter", name)
		}
		w.compile(v.d, path)
	}
	v.usedWindows = map[string]bool{}
	v.capabilities()
	v.quorumChecks()
	for _, name := range slices.Sorted(maps.Keys(p.TimeWindows)) {
		if !v.usedWindows[name] {
			v.warnf(p.TimeWindows[name].At.Key, "time_windows."+name, "no rule uses this time window")
		}
	}
	if id := p.Identity; id != nil {
		v.identity(id)
	}
	if e := p.Emergency; e != nil {
		v.role(e.At, "emergency.override_permission", "override_permission", e.OverridePermission)
		if !e.At.Has("override_permission") {
			v.errorf(e.At.Self, "emergency", "missing required key \"override_permission\" (the role an override grants)")
		}
		if !e.At.Has("override_token_ttl_seconds") {
			v.errorf(e.At.Self, "emergency", "missing required key \"override_token_ttl_seconds\" (how long an override lasts)")
		} else if e.OverrideTokenTTLSeconds < 1 {
			v.errorf(e.At.Of("override_token_ttl_seconds"), "emergency.override_token_ttl_seconds", "must be at least 1, got %d", e.OverrideTokenTTLSeconds)
		}
	}
}

// capabilities resolves each key to a tool (or keeps it as a pattern),
// re-keys the map by tool name and checks the rules, each against the
// manifest's tools it applies to.
func (v *validator) capabilities() {
	p := v.p
	if len(p.Capabilities) == 0 {
		return
	}
	var tools []string
	if v.m != nil {
		for _, c := range v.m.Capabilities {
			tools = append(tools, c.ToolName())
		}
	}
	byTool := map[string]*ToolPolicy{}
	keyOf := map[string]string{}
	keys := slices.Sorted(maps.Keys(p.Capabilities))
	slices.SortStableFunc(keys, func(a, b string) int { // in source order, so "first" means first in the file
		return p.Capabilities[a].At.Key.Line - p.Capabilities[b].At.Key.Line
	})
	for _, key := range keys {
		tp := p.Capabilities[key]
		path := "capabilities." + key
		if v.m == nil {
			v.errorf(tp.At.Self, path, "cannot check rules without a valid manifest")
			continue
		}
		if isPattern(key) {
			if _, err := pathpkg.Match(key, ""); err != nil {
				v.errorf(tp.At.Key, path, "%q is not a valid pattern: %v (a pattern uses * for any run of characters, ? for one, [...] for one of a set)", key, err)
				continue
			}
			if !mayMatchTool(key) {
				v.errorf(tp.At.Key, path, "the pattern %q can match no tool name: a pattern matches whole tool names, which start with read_ or do_ (do_gh?_vent_fan, not gh?_vent_fan)", key)
				continue
			}
			tp.Tool = key
			v.rules(path, tp)
			p.Patterns = append(p.Patterns, tp)
			continue
		}
		tool, c := v.resolveTool(key, tp, tools)
		if tool == "" {
			continue
		}
		if first, dup := keyOf[tool]; dup {
			v.errorf(tp.At.Key, path, "%s already has rules under %q; put them in one place", tool, first)
			continue
		}
		keyOf[tool] = key
		tp.Tool = tool
		byTool[tool] = tp
		v.rules(path, tp)
		if c != nil {
			v.fit(path, tp, c)
		}
	}
	p.Capabilities = byTool
	if v.m != nil {
		v.patterns()
	}
}

// patterns checks each pattern against the manifest's tools it applies to.
// A pattern that applies to none is an error unless tools are adopted.
func (v *validator) patterns() {
	p := v.p
	applies := map[*ToolPolicy]bool{}
	for _, c := range v.m.Capabilities {
		tp, others := p.entry(c.ToolName())
		if tp == nil || !isPattern(tp.Tool) {
			continue
		}
		applies[tp] = true
		v.fit("capabilities."+tp.Tool, tp, c)
		for _, o := range others {
			v.warnf(o.At.Key, "capabilities."+o.Tool, "%s", shadowed(c.ToolName(), tp, o))
		}
	}
	if v.m.Adopts() {
		return // the tools it is for may come from the adopted sources
	}
	for _, tp := range p.Patterns {
		if !applies[tp] {
			v.errorf(tp.At.Key, "capabilities."+tp.Tool, "the pattern %q applies to no tool of the manifest (a tool with an entry of its own follows that entry alone)", tp.Tool)
		}
	}
}

// resolveTool is the tool a key names, with its capability; the capability
// is nil for a tool name the manifest does not have but may adopt.
func (v *validator) resolveTool(key string, tp *ToolPolicy, tools []string) (string, *manifest.Capability) {
	path := "capabilities." + key
	if c := v.m.Tool(key); c != nil {
		return key, c
	}
	var matches []*manifest.Capability
	for _, c := range v.m.Capabilities {
		if c.Name == key {
			matches = append(matches, c)
		}
	}
	switch len(matches) {
	case 1:
		return matches[0].ToolName(), matches[0]
	case 0:
		if !v.m.Adopts() {
			v.errorf(tp.At.Key, path, "the manifest has no tool or capability %q%s", key, strictyaml.SuggestAmong(key, tools, "tools"))
			break
		}
		// Adopted tools are known when adopted: the name is checked then.
		if problem := manifest.ToolNameProblem(key); problem != "" || !strings.HasPrefix(key, "read_") && !strings.HasPrefix(key, "do_") {
			v.errorf(tp.At.Key, path, "the manifest has no tool or capability %q%s; a tool adopted from a source is named by its tool name (read_... or do_..., as adopt.names names it) or a pattern (do_*_vent_fan)", key, strictyaml.SuggestAmong(key, tools, "tools"))
			break
		}
		tp.pending = true
		return key, nil
	default:
		v.errorf(tp.At.Key, path, "%q names both read_%s and do_%s; write the tool name", key, key, key)
	}
	return "", nil
}

// onlyOnce are the rule types a tool may have at most one of: two would contradict each other.
var onlyOnce = []RuleType{RuleRangeGuard, RuleQuorum, RuleHumanApproval}

// decoded reports whether a rule decoded (a failure is reported already).
func (r *Rule) decoded() bool {
	return r.Type != "" && (r.TimeWindow != nil || r.Permission != nil || r.Rate != nil || r.Quorum != nil || r.RangeGuard != nil || r.Approval != nil)
}

// rules checks what the rules of an entry say in themselves, whatever tool
// they apply to (fit checks them against one).
func (v *validator) rules(path string, tp *ToolPolicy) {
	if tp.At.Has("rules") && len(tp.Rules) == 0 {
		v.warnf(tp.At.Of("rules"), path+".rules", "no rules; remove the entry or add a rule")
	}
	seen := map[RuleType]bool{}
	for i, r := range tp.Rules {
		rp := fmt.Sprintf("%s.rules[%d]", path, i)
		if !r.decoded() {
			continue
		}
		if seen[r.Type] && slices.Contains(onlyOnce, r.Type) {
			v.errorf(r.At.Of("type"), rp+".type", "%s already has a %s rule; give one", tp.Tool, r.Type)
		}
		seen[r.Type] = true
		switch {
		case r.TimeWindow != nil:
			v.timeWindowRule(rp, r.TimeWindow)
		case r.Permission != nil:
			v.permissionRule(rp, r.Permission)
		case r.Quorum != nil:
			q := r.Quorum
			if q.MinPeers < 1 && q.At.Has("min_peers") {
				v.errorf(q.At.Of("min_peers"), rp+".min_peers", "must be at least 1 (this node counts), got %d", q.MinPeers)
			}
			switch q.OnFailure {
			case "":
				q.OnFailure = "deny"
			case "deny", "allow_local":
			default:
				v.errorf(q.At.Of("on_failure"), rp+".on_failure", "must be deny or allow_local, got %q", q.OnFailure)
			}
			switch q.Peers {
			case "", QuorumZone, QuorumMesh:
			default:
				v.errorf(q.At.Of("peers"), rp+".peers", "must be zone or mesh, got %q", q.Peers)
			}
			if q.At.Has("check") && !namePattern.MatchString(q.Check) {
				v.errorf(q.At.Of("check"), rp+".check", "quorum check name %q must be lowercase letters, digits, _ and - and start with a letter", q.Check)
			}
		case r.RangeGuard != nil:
			v.rangeGuardBounds(rp, r.RangeGuard)
		case r.Approval != nil:
			a := r.Approval
			if !a.At.Has("timeout_s") {
				a.TimeoutS = DefaultApprovalTimeoutS
			} else if a.TimeoutS < 1 {
				v.errorf(a.At.Of("timeout_s"), rp+".timeout_s", "must be at least 1 second, got %d", a.TimeoutS)
			}
		}
	}
}

// fit checks the rules of an entry against one tool they apply to: a rule
// for do_ tools on a read, a range guard outside its range, a role below its
// minimum. It changes nothing, so that it can check an adopted tool while
// the policy is in use.
func (v *validator) fit(path string, tp *ToolPolicy, c *manifest.Capability) {
	for i, r := range tp.Rules {
		rp := fmt.Sprintf("%s.rules[%d]", path, i)
		if !r.decoded() {
			continue
		}
		doOnly := r.Type == RuleRate || r.Type == RuleQuorum || r.Type == RuleRangeGuard
		if doOnly && c.Kind != manifest.KindDo {
			v.errorf(r.At.Of("type"), rp+".type", "a %s rule only applies to do_ tools, and %s is a read", r.Type, c.ToolName())
			continue
		}
		switch {
		case r.Permission != nil:
			v.permissionMinimum(rp, r.Permission, c)
		case r.Quorum != nil:
			v.quorumRuleCheck(rp, r.Quorum, c)
		case r.RangeGuard != nil:
			v.rangeGuard(rp, r.RangeGuard, c)
		}
	}
}

// quorumRuleCheck checks the name of the quorum check a rule asks its
// peers to run. The peers define it, so it is not looked up here.
func (v *validator) quorumRuleCheck(path string, q *QuorumRule, c *manifest.Capability) {
	if !q.At.Has("check") {
		return
	}
	need := q.MinPeers
	if c.RequiresQuorum {
		need = max(need, c.QuorumSize)
	}
	if need == 1 {
		v.errorf(q.At.Of("check"), path+".check", "the peers run the check when they vote, and with min_peers 1 no peer votes; raise min_peers or remove check")
	}
}

// quorumChecks resolves each check's conditions against the manifest, as
// interlocks are, and its time windows.
func (v *validator) quorumChecks() {
	p := v.p
	for _, name := range slices.Sorted(maps.Keys(p.QuorumChecks)) {
		qc := p.QuorumChecks[name]
		qc.Name = name
		path := "quorum_checks." + name
		if !namePattern.MatchString(name) {
			v.errorf(qc.At.Key, path, "quorum check name %q must be lowercase letters, digits, _ and - and start with a letter", name)
		}
		if len(qc.Conditions) == 0 && len(qc.AllowDuring) == 0 && len(qc.DenyDuring) == 0 {
			v.errorf(qc.At.Self, path, "a quorum check needs conditions, allow_during or deny_during: one that checks nothing would confirm every vote")
		}
		if len(qc.AllowDuring) > 0 || len(qc.DenyDuring) > 0 {
			qc.Window = &TimeWindowRule{AllowDuring: qc.AllowDuring, DenyDuring: qc.DenyDuring, At: qc.At}
			v.timeWindowRule(path, qc.Window)
		}
		for i, c := range qc.Conditions {
			cp := fmt.Sprintf("%s.conditions[%d]", path, i)
			if v.m == nil {
				v.errorf(c.At.Self, cp, "cannot check conditions without a valid manifest")
				continue
			}
			c.Interlock = &manifest.Interlock{Capability: c.Capability, Op: c.Op, Value: c.Value, Reason: c.Reason, At: c.At}
			v.m.CheckCondition(v.d, cp, c.Interlock)
		}
	}
	if len(p.QuorumChecks) == 0 || v.m == nil {
		return
	}
	// Only mesh peers are answered: without them the checks are never run.
	switch {
	case v.m.Network == nil || v.m.Network.Mesh == nil || !v.m.Network.Mesh.Enabled:
		v.warnf(p.At.Of("quorum_checks"), "quorum_checks", "the manifest's network.mesh is not enabled, so no peer asks this node to vote")
	case p.Identity == nil || p.Identity.Mesh == nil:
		v.warnf(p.At.Of("quorum_checks"), "quorum_checks", "without identity.mesh this node answers no peer's vote")
	}
}

func (v *validator) timeWindowRule(path string, r *TimeWindowRule) {
	if len(r.AllowDuring) == 0 && len(r.DenyDuring) == 0 {
		v.errorf(r.At.Self, path, "a time_window rule needs allow_during, deny_during or both")
	}
	names := slices.Sorted(maps.Keys(v.p.TimeWindows))
	check := func(key string, list []string) {
		for i, name := range list {
			v.usedWindows[name] = true
			if v.p.TimeWindows[name] == nil {
				hint := strictyaml.SuggestAmong(name, names, "windows")
				if len(names) == 0 {
					hint = " (the policy defines no time_windows)"
				}
				v.errorf(r.At.Of(key), fmt.Sprintf("%s.%s[%d]", path, key, i), "no time window named %q%s", name, hint)
			}
		}
	}
	check("allow_during", r.AllowDuring)
	check("deny_during", r.DenyDuring)
	for i, name := range r.DenyDuring {
		if slices.Contains(r.AllowDuring, name) {
			v.errorf(r.At.Of("deny_during"), fmt.Sprintf("%s.deny_during[%d]", path, i), "%q is in both allow_during and deny_during", name)
		}
	}
}

func (v *validator) permissionRule(path string, r *PermissionRule) {
	if r.At.Has("require") && len(r.Require) == 0 {
		v.errorf(r.At.Of("require"), path+".require", "needs at least one role")
	}
	for i, role := range r.Require {
		if !manifest.ValidRole(role) {
			v.errorf(r.At.Of("require"), fmt.Sprintf("%s.require[%d]", path, i), "unknown role %q; expected one of %s", role, manifest.RoleNames())
		}
	}
}

// permissionMinimum warns of a required role below the tool's minimum.
func (v *validator) permissionMinimum(path string, r *PermissionRule, c *manifest.Capability) {
	min := c.RequiresPermission
	for i, role := range r.Require {
		if manifest.ValidRole(role) && min != "" && !role.AtLeast(min) {
			v.warnf(r.At.Of("require"), fmt.Sprintf("%s.require[%d]", path, i), "role %s is below the manifest's requires_permission %s for %s, which still applies", role, min, c.ToolName())
		}
	}
}

// rangeGuardBounds checks a guard in itself.
func (v *validator) rangeGuardBounds(path string, g *RangeGuard) {
	switch g.OnViolation {
	case ViolationClamp, ViolationDeny, ViolationWarn, "":
	default:
		v.errorf(g.At.Of("on_violation"), path+".on_violation", "must be clamp, deny or warn, got %q", g.OnViolation)
	}
	if g.Min == nil && g.Max == nil {
		v.errorf(g.At.Self, path, "a range_guard needs min, max or both")
	} else if g.Min != nil && g.Max != nil && *g.Min > *g.Max {
		v.errorf(g.At.Of("min"), path+".min", "min %g is greater than max %g", *g.Min, *g.Max)
	}
}

// rangeGuard checks a guard against the tool it applies to (rangeGuardBounds
// reports a guard without bounds, or with min above max).
func (v *validator) rangeGuard(path string, g *RangeGuard, c *manifest.Capability) {
	if !c.IsNumeric() {
		v.errorf(g.At.Self, path, "a range_guard only applies to numeric tools; %s is %s", c.ToolName(), c.DataType)
		return
	}
	if g.Min == nil && g.Max == nil || g.Min != nil && g.Max != nil && *g.Min > *g.Max {
		return
	}
	bad := false
	r := c.Range
	if r == nil || r.Min == nil || r.Max == nil {
		return // the manifest already reports a numeric do without a full range
	}
	if g.Min != nil && (*g.Min < *r.Min || *g.Min > *r.Max) {
		v.errorf(g.At.Of("min"), path+".min", "min %g is wider than the manifest range %s of %s (a guard can only narrow it)", *g.Min, r, c.ToolName())
		bad = true
	}
	if g.Max != nil && (*g.Max > *r.Max || *g.Max < *r.Min) {
		v.errorf(g.At.Of("max"), path+".max", "max %g is wider than the manifest range %s of %s (a guard can only narrow it)", *g.Max, r, c.ToolName())
		bad = true
	}
	if !bad {
		v.guardSteps(path, g, c)
	}
}

// guardSteps checks a guard against the values the binding holds. The guard
// lies inside the manifest range, which the manifest's validation holds to
// what the binding can carry, so no bound is beyond the binding; but one can
// fall between two values it holds, and as writes are quantised before they
// are checked, the bound that acts is the value inside.
func (v *validator) guardSteps(path string, g *RangeGuard, c *manifest.Capability) {
	enc, ok := c.Encoding()
	if !ok || enc.Step == 0 {
		return
	}
	lo, hi := *c.Range.Min, *c.Range.Max
	if g.Min != nil {
		lo = *g.Min
	}
	if g.Max != nil {
		hi = *g.Max
	}
	qlo, qhi, some := enc.Within(lo, hi)
	if !some {
		v.errorf(g.At.Self, path, "%s holds no value in %g..%g (%s in steps of %g), so the guard lets nothing through", c.ToolName(), lo, hi, enc, enc.Step)
		return
	}
	if g.Min != nil && qlo != *g.Min {
		v.warnf(g.At.Of("min"), path+".min", "min %g is not a value %s can write (%s in steps of %g); the least value the guard lets through is %g", *g.Min, c.ToolName(), enc, enc.Step, qlo)
	}
	if g.Max != nil && qhi != *g.Max {
		v.warnf(g.At.Of("max"), path+".max", "max %g is not a value %s can write (%s in steps of %g); the greatest value the guard lets through is %g", *g.Max, c.ToolName(), enc, enc.Step, qhi)
	}
}

var providerKeys = map[string][]string{
	"static": {"tokens"},
	"jwt":    {"issuer", "audience", "key_file", "role_claim"},
	"mtls":   {"ca_cert_path", "subject", "clients"},
}

func (v *validator) identity(id *Identity) {
	if id.Mesh != nil {
		v.role(id.Mesh.At, "identity.mesh.role", "role", id.Mesh.Role)
	}
	v.role(id.At, "identity.local_role", "local_role", id.LocalRole)
	if r := id.SerialRole; r != "" && r != manifest.RoleViewer && !manifest.ValidRole(r) {
		v.errorf(id.At.Of("serial_role"), "identity.serial_role", "unknown role %q; expected %q or one of %s", r, manifest.RoleViewer, manifest.RoleNames())
	}
	names := map[string]bool{}
	hashes := map[string]bool{}
	for i, pr := range id.Providers {
		path := fmt.Sprintf("identity.providers[%d]", i)
		if _, ok := providerKeys[pr.Type]; !ok {
			if pr.Type != "" {
				v.errorf(pr.At.Of("type"), path+".type", "must be static, jwt or mtls, got %q", pr.Type)
			}
			continue
		}
		for _, typ := range slices.Sorted(maps.Keys(providerKeys)) {
			for _, key := range providerKeys[typ] {
				if typ != pr.Type && pr.At.Has(key) {
					v.errorf(pr.At.Of(key), path+"."+key, "%s belongs to a %s provider, not %s", key, typ, pr.Type)
				}
			}
		}
		switch pr.Type {
		case "static":
			if len(pr.Tokens) == 0 {
				v.errorf(pr.At.Of("tokens"), path+".tokens", "a static provider needs tokens")
			}
			for j, tok := range pr.Tokens {
				tp := fmt.Sprintf("%s.tokens[%d]", path, j)
				if names[tok.Name] {
					v.errorf(tok.At.Of("name"), tp+".name", "token name %q is used twice", tok.Name)
				}
				names[tok.Name] = true
				switch {
				case !sha256Hex.MatchString(tok.SHA256):
					v.errorf(tok.At.Of("sha256"), tp+".sha256", "must be the token's SHA-256 as 64 lowercase hex digits (sha256sum), not the token itself")
				case hashes[tok.SHA256]:
					v.errorf(tok.At.Of("sha256"), tp+".sha256", "the same token hash is listed twice")
				}
				hashes[tok.SHA256] = true
				v.role(tok.At, tp+".role", "role", tok.Role)
			}
		case "jwt":
			for _, key := range []string{"issuer", "audience"} {
				if !pr.At.Has(key) {
					v.errorf(pr.At.Self, path, "a jwt provider needs %s", key)
				}
			}
			if pr.RoleClaim == "" {
				pr.RoleClaim = "role"
			}
			if !pr.At.Has("key_file") {
				v.errorf(pr.At.Self, path, "a jwt provider needs key_file (an HMAC secret of at least 32 bytes, or the issuer's PEM public key) to verify signatures")
			}
		case "mtls":
			if pr.CACertPath == "" {
				v.errorf(pr.At.Self, path, "an mtls provider needs ca_cert_path (the CA that signs client certificates)")
			}
			switch pr.Subject {
			case "":
				pr.Subject = SubjectCN
			case SubjectCN, SubjectDNS, SubjectEmail, SubjectURI:
			default:
				v.errorf(pr.At.Of("subject"), path+".subject", "must be cn, dns, email or uri, got %q", pr.Subject)
			}
			if len(pr.Clients) == 0 {
				v.errorf(pr.At.Self, path, "an mtls provider needs clients: the certificate names it accepts and their roles")
			}
			seen := map[string]bool{}
			for j, c := range pr.Clients {
				cp := fmt.Sprintf("%s.clients[%d]", path, j)
				if c.Name == "" {
					v.errorf(c.At.Of("name"), cp+".name", "must not be empty")
				} else if seen[c.Name] {
					v.errorf(c.At.Of("name"), cp+".name", "client %q is listed twice", c.Name)
				}
				seen[c.Name] = true
				v.role(c.At, cp+".role", "role", c.Role)
			}
		}
	}
}
