// Package policy is physmcp.policy.yml: who may call which tool, when, how
// often and within which bounds. It is parsed strictly and checked against the
// manifest it governs.
package policy

import (
	"time"

	"github.com/physmcp/physmcpd/internal/strictyaml"
	"github.com/physmcp/physmcpd/manifest"
)

// Positions re-exports the decoder's position record.
type Positions = strictyaml.Positions

// Policy is one physmcp.policy.yml.
type Policy struct {
	File string `yaml:"-"`

	Version      string                 `yaml:"physmcp_policy_version,required"`
	Defaults     *Defaults              `yaml:"defaults"`
	Capabilities map[string]*ToolPolicy `yaml:"capabilities"`
	TimeWindows  map[string]*TimeWindow `yaml:"time_windows"`
	Identity     *Identity              `yaml:"identity"`
	Emergency    *Emergency             `yaml:"emergency"`
	// QuorumChecks are what this node checks before it confirms a peer's
	// quorum vote that names one.
	QuorumChecks map[string]*QuorumCheck `yaml:"quorum_checks"`

	// Patterns are the capabilities entries keyed by a glob (do_*_vent_fan),
	// in file order: each applies to the tools it matches that have no entry
	// of their own, the first in the file where several match.
	Patterns []*ToolPolicy `yaml:"-"`
	// checked are the manifest's capabilities, whose rules Parse checked
	// against them; adopted capabilities are checked when adopted (Adopted).
	checked map[*manifest.Capability]bool

	At Positions `yaml:"-"`
}

// Defaults apply to every tool that does not say otherwise.
type Defaults struct {
	RequirePermission manifest.Role  `yaml:"require_permission"`
	RateLimit         *manifest.Rate `yaml:"rate_limit"`
	AuditAll          bool           `yaml:"audit_all"`

	At Positions `yaml:"-"`
}

// ToolPolicy holds the rules for one tool, or for the tools a pattern
// matches. The key in the file may be the tool name (do_fan_speed), the
// capability name (fan_speed) or a pattern (do_*_fan); Tool is the tool name,
// or the pattern.
type ToolPolicy struct {
	Tool  string  `yaml:"-"`
	Rules []*Rule `yaml:"rules,required"`
	// pending: a tool name the manifest does not have, expected from a
	// source the manifest adopts wholesale.
	pending bool

	At Positions `yaml:"-"`
}

// RuleType names a rule.
type RuleType string

const (
	RuleTimeWindow    RuleType = "time_window"
	RulePermission    RuleType = "permission"
	RuleRate          RuleType = "rate"
	RuleQuorum        RuleType = "quorum"
	RuleRangeGuard    RuleType = "range_guard"
	RuleHumanApproval RuleType = "human_approval"
)

// Rule is one entry of a tool's rules; exactly one part is set, by Type.
type Rule struct {
	Type RuleType

	TimeWindow *TimeWindowRule
	Permission *PermissionRule
	Rate       *RateRule
	Quorum     *QuorumRule
	RangeGuard *RangeGuard
	Approval   *ApprovalRule

	At Positions
}

// TimeWindowRule allows the tool only inside allow_during (if any) and never inside deny_during.
type TimeWindowRule struct {
	AllowDuring []string `yaml:"allow_during"`
	DenyDuring  []string `yaml:"deny_during"`

	At Positions `yaml:"-"`
}

// PermissionRule requires any one of the roles (any-of).
type PermissionRule struct {
	Require []manifest.Role `yaml:"require,required"`

	At Positions `yaml:"-"`
}

// RateRule is a further rate limit on top of the manifest's.
type RateRule struct {
	Max *manifest.Rate `yaml:"max,required"`

	At Positions `yaml:"-"`
}

// QuorumRule requires min_peers nodes (this one included).
type QuorumRule struct {
	MinPeers  int    `yaml:"min_peers,required"`
	OnFailure string `yaml:"on_failure"` // deny (default) | allow_local
	// Peers says which peers count: QuorumZone (default) or QuorumMesh.
	Peers string `yaml:"peers"`
	// Check names the quorum check each voting peer runs under its own
	// policy (its quorum_checks) before it confirms; empty: none.
	Check string `yaml:"check"`

	At Positions `yaml:"-"`
}

// QuorumCheck is what this node checks, on fresh readings of its own
// capabilities, before it confirms a peer's quorum vote that names it:
// every condition holds and the time windows allow it.
type QuorumCheck struct {
	Name        string       `yaml:"-"`
	Conditions  []*Condition `yaml:"conditions"`
	AllowDuring []string     `yaml:"allow_during"`
	DenyDuring  []string     `yaml:"deny_during"`

	// Window is allow_during and deny_during as a time_window rule (set by
	// validation; nil without either).
	Window *TimeWindowRule `yaml:"-"`

	At Positions `yaml:"-"`
}

// Condition compares one of this device's readings, as a manifest
// interlock does.
type Condition struct {
	Capability string `yaml:"capability,required"`
	Op         string `yaml:"op,required"`
	Value      any    `yaml:"value,required"`
	Reason     string `yaml:"reason"`

	// Interlock is the condition resolved against the manifest (set by
	// validation): the engine evaluates it as it does an interlock.
	Interlock *manifest.Interlock `yaml:"-"`

	At Positions `yaml:"-"`
}

// Which peers a quorum counts.
const (
	// QuorumZone counts the alive peers in this device's zone.
	QuorumZone = "zone"
	// QuorumMesh counts every alive peer of the mesh.
	QuorumMesh = "mesh"
)

// Violation says what a range guard does with a value outside it.
type Violation string

const (
	ViolationClamp Violation = "clamp"
	ViolationDeny  Violation = "deny"
	ViolationWarn  Violation = "warn"
)

// RangeGuard narrows the manifest range for this tool.
type RangeGuard struct {
	Min         *float64  `yaml:"min"`
	Max         *float64  `yaml:"max"`
	OnViolation Violation `yaml:"on_violation,required"`

	At Positions `yaml:"-"`
}

// ApprovalRule requires a person to approve each call.
type ApprovalRule struct {
	// TimeoutS bounds how long the person has to answer (default 120 s).
	TimeoutS int `yaml:"timeout_s"`

	At Positions `yaml:"-"`
}

// TimeWindow is a named weekly window in an IANA time zone. A window whose end
// is before its start runs over midnight.
type TimeWindow struct {
	Name     string   `yaml:"-"`
	Days     []string `yaml:"days"` // mon..sun; empty = every day
	Start    string   `yaml:"start,required"`
	End      string   `yaml:"end,required"`
	Timezone string   `yaml:"timezone,required"`

	// Filled by validation.
	Location *time.Location `yaml:"-"`
	StartMin int            `yaml:"-"` // minutes after midnight
	EndMin   int            `yaml:"-"`
	DaySet   [7]bool        `yaml:"-"` // indexed by time.Weekday

	At Positions `yaml:"-"`
}

// Identity maps callers to roles.
type Identity struct {
	// LocalRole is the role of a stdio (or serial) caller: whoever can start the process.
	LocalRole manifest.Role `yaml:"local_role"`
	// SerialRole is the role of a peer on the --serial line: whoever is on
	// the wire, not someone who could start the process.
	SerialRole manifest.Role `yaml:"serial_role"`
	Providers  []*Provider   `yaml:"providers"`
	// Mesh is how this node treats calls from its mesh peers.
	Mesh *MeshIdentity `yaml:"mesh"`

	At Positions `yaml:"-"`
}

// MeshIdentity is the role a mesh peer calls with: a peer presents a
// short-lived credential signed with the mesh keyring (never its caller's
// token), and its forwarded can_do queries and quorum votes are answered as
// this role.
type MeshIdentity struct {
	Role manifest.Role `yaml:"role,required"`

	At Positions `yaml:"-"`
}

// Provider is one way to authenticate HTTP callers.
type Provider struct {
	Type string `yaml:"type,required"` // static|jwt|mtls
	// static
	Tokens []*StaticToken `yaml:"tokens"`
	// jwt
	Issuer   string `yaml:"issuer"`
	Audience string `yaml:"audience"`
	// Secret file or public key file for verifying signatures (HS256 / RS256 / ES256).
	KeyFile   string `yaml:"key_file"`
	RoleClaim string `yaml:"role_claim"`
	// mtls
	CACertPath string `yaml:"ca_cert_path"`
	// Subject says which name of a client certificate is looked up in
	// Clients: cn (the subject's common name, default), dns, email or uri
	// (a subject alternative name of that kind).
	Subject string        `yaml:"subject"`
	Clients []*CertClient `yaml:"clients"`

	At Positions `yaml:"-"`
}

// Certificate subject kinds an mtls provider can identify clients by.
const (
	SubjectCN    = "cn"
	SubjectDNS   = "dns"
	SubjectEmail = "email"
	SubjectURI   = "uri"
)

// CertClient maps one client certificate name to a role.
type CertClient struct {
	Name string        `yaml:"name,required"`
	Role manifest.Role `yaml:"role,required"`

	At Positions `yaml:"-"`
}

// StaticToken is a bearer token stored only as its SHA-256 hash (hex).
type StaticToken struct {
	Name   string        `yaml:"name,required"`
	SHA256 string        `yaml:"sha256,required"`
	Role   manifest.Role `yaml:"role,required"`

	At Positions `yaml:"-"`
}

// Emergency configures override tokens.
type Emergency struct {
	OverridePermission      manifest.Role `yaml:"override_permission"`
	OverrideTokenTTLSeconds int           `yaml:"override_token_ttl_seconds"`
	AuditAllOverrides       bool          `yaml:"audit_all_overrides"`

	At Positions `yaml:"-"`
}
