// Package promcp holds the proMCP v0.2 wire contracts (SPEC.md §1) as Go types
// and JSON Schemas: read_* responses, do_* inputs and responses, can_do intents
// and CapabilityReports, and the permission enum. It knows nothing of buses or MCP.
package promcp

import (
	"time"

	"github.com/physmcp/physmcpd/manifest"
)

// BaseVersion is the proMCP version this server implements (declared as promcp_base).
const BaseVersion = "0.2.0"

// Quality is how far a read_* value can be trusted.
type Quality string

const (
	QualityGood     Quality = "good"
	QualityStale    Quality = "stale"
	QualityDegraded Quality = "degraded"
	QualityError    Quality = "error"
)

// Permission is the proMCP permission enum: exactly these nine values.
type Permission string

const (
	Allowed                Permission = "allowed"
	RequiresHumanApproval  Permission = "requires_human_approval"
	PolicyDenied           Permission = "policy_denied"
	RateLimited            Permission = "rate_limited"
	CooldownActive         Permission = "cooldown_active"
	OutOfRange             Permission = "out_of_range"
	PermissionInsufficient Permission = "permission_insufficient"
	SourceUnreachable      Permission = "source_unreachable"
	PartitionNoQuorum      Permission = "partition_no_quorum"
)

// Permissions lists the enum in the spec's order.
var Permissions = []Permission{
	Allowed, RequiresHumanApproval, PolicyDenied, RateLimited, CooldownActive,
	OutOfRange, PermissionInsufficient, SourceUnreachable, PartitionNoQuorum,
}

// PhysMCP's extension permissions, prefixed as proMCP requires of extensions.
const (
	// DeviceRejected: the device answered and refused the request (a Modbus
	// exception reply such as illegal data address or value). Unlike
	// source_unreachable, waiting does not help: the request must change.
	DeviceRejected Permission = "physmcp:device_rejected"
	// Superseded: a retried idempotency key whose write had no known outcome
	// was followed by a later write to the same register or line; writing it
	// now would undo that later write, so nothing is written.
	Superseded Permission = "physmcp:superseded"
	// NotServed: a blocked can_do entry for a capability an adopted device
	// offers that is not served under that name (it is another device's, or
	// no tool name); the reason says which. Waiting does not help: the
	// aggregator's adopt.names must tell the devices apart.
	NotServed Permission = "physmcp:not_served"
)

// ExtensionPermissions lists the extension values the server may answer.
var ExtensionPermissions = []Permission{DeviceRejected, Superseded, NotServed}

// Status is the outcome of a do_* call.
type Status string

const (
	StatusSuccess Status = "success"
	StatusPartial Status = "partial"
	StatusFailed  Status = "failed"
)

// Time formats timestamps as RFC 3339 UTC with milliseconds.
func Time(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// ReadResponse is what every read_* returns.
type ReadResponse struct {
	Value     any     `json:"value"`
	Unit      *string `json:"unit"`
	Timestamp string  `json:"timestamp"`
	Quality   Quality `json:"quality"`
	// Extensions (PhysMCP): the device and, when quality is not good, why.
	DeviceID string `json:"device_id,omitempty"`
	Detail   string `json:"detail,omitempty"`
	// Source names the device that measured the value when it is adopted
	// from another one (a proxy's virtual capability).
	Source string `json:"source,omitempty"`
}

// DoRequest is the input of every do_*.
type DoRequest struct {
	Value          any    `json:"value"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// Compensation is the undo call as data.
type Compensation struct {
	Tool      string         `json:"tool"`
	Arguments map[string]any `json:"arguments"`
}

// DoResponse is what every do_* returns.
type DoResponse struct {
	Status           Status        `json:"status"`
	IdempotencyKey   string        `json:"idempotency_key"`
	AppliedValue     any           `json:"applied_value"`
	PreviousValue    any           `json:"previous_value"`
	SideEffects      []string      `json:"side_effects"`
	Compensable      bool          `json:"compensable"`
	CompensationHint *string       `json:"compensation_hint"`
	Timestamp        string        `json:"timestamp"`
	Compensation     *Compensation `json:"compensation,omitempty"`
	// Extensions: why a call failed or was changed, as a permission and in words.
	Permission Permission `json:"permission,omitempty"`
	Reason     string     `json:"reason,omitempty"`
	Warnings   []string   `json:"warnings,omitempty"`
	DeviceID   string     `json:"device_id,omitempty"`
}

// Intent is what a can_do caller wants to do.
type Intent struct {
	SemanticTags []string `json:"semantic_tags"`
	Action       string   `json:"action,omitempty"`
	Target       string   `json:"target,omitempty"`
	Value        any      `json:"value,omitempty"`
	Location     string   `json:"location,omitempty"`
}

// Actions are the intent actions proMCP defines.
var Actions = []string{"read", "create", "update", "delete", "toggle", "increase", "decrease", "set"}

// CanDoRequest is the input of can_do. PhysMCP's query/direction are accepted as aliases.
type CanDoRequest struct {
	Intent Intent   `json:"intent"`
	Scope  []string `json:"scope,omitempty"`
	// MaxCandidates caps the candidates, the blocked entries and the related
	// reads listed, each (PhysMCP extension); 0 means DefaultMaxCandidates.
	MaxCandidates int `json:"max_candidates,omitempty"`
}

// Limit is the cap that applies to each list of the report: MaxCandidates,
// or DefaultMaxCandidates when the caller did not say.
func (r CanDoRequest) Limit() int {
	if r.MaxCandidates <= 0 {
		return DefaultMaxCandidates
	}
	return r.MaxCandidates
}

// CurrentState is a candidate's last known value.
type CurrentState struct {
	Value     any     `json:"value"`
	Unit      *string `json:"unit"`
	Timestamp string  `json:"timestamp"`
}

// MetaMinRole and MetaRoles are the keys of a tool's _meta in tools/list
// that say what its call asks of the caller's role, as can_do's constraints
// min_role and roles do: an aggregator or proxy that adopts the tool asks
// at least as much of its own callers, since the device sees the role it
// gives the aggregator, not theirs.
const (
	MetaMinRole = "physmcp/min_role"
	MetaRoles   = "physmcp/roles"
)

// Constraints bound what a candidate accepts.
type Constraints struct {
	Min        *float64 `json:"min"`
	Max        *float64 `json:"max"`
	Unit       *string  `json:"unit"`
	EnumValues []string `json:"enum_values"`
	// Extensions.
	RateLimit  string `json:"rate_limit,omitempty"`
	CooldownMs int    `json:"cooldown_ms,omitempty"`
	// MinRole is the lowest role a call passes the role checks with;
	// Roles, only when some role above it does not pass, lists those that do.
	MinRole string   `json:"min_role,omitempty"`
	Roles   []string `json:"roles,omitempty"`
	// Quorum is a do_*'s quorum rule (PhysMCP), nil without one.
	Quorum *QuorumConstraint `json:"quorum,omitempty"`
}

// QuorumConstraint says what a do_* needs from the mesh: MinPeers nodes,
// this one included, of Peers (zone or mesh) confirm in a vote round, each
// after running its own quorum check Check (none when empty).
type QuorumConstraint struct {
	MinPeers int    `json:"min_peers"`
	Peers    string `json:"peers"`
	Check    string `json:"check,omitempty"`
}

// Candidate is a capability that can serve the intent.
type Candidate struct {
	Capability         string       `json:"capability"`
	Source             string       `json:"source"`
	Confidence         float64      `json:"confidence"`
	Permission         Permission   `json:"permission"`
	CurrentState       CurrentState `json:"current_state"`
	Constraints        Constraints  `json:"constraints"`
	SideEffects        []string     `json:"side_effects"`
	ValidUntil         string       `json:"valid_until"`
	EstimatedLatencyMs int64        `json:"estimated_latency_ms"`
	// Extensions (PhysMCP).
	DeviceID     string   `json:"device_id,omitempty"`
	MatchReasons []string `json:"match_reasons,omitempty"`
	// AdoptedFrom is where an adopted capability comes from (PhysMCP proxy).
	AdoptedFrom *manifest.AdoptedFrom `json:"adopted_from,omitempty"`
	// Endpoint is where to call the tool when not here: the MCP endpoint
	// URL of the mesh peer that serves it, or the HTTP path of the group
	// endpoint on an aggregator's site endpoint.
	Endpoint string `json:"endpoint,omitempty"`
}

// Blocked is a capability that matched but cannot act now.
type Blocked struct {
	Capability string     `json:"capability"`
	Source     string     `json:"source"`
	Permission Permission `json:"permission"`
	Reason     string     `json:"reason"`
	Details    *string    `json:"details"`
	// Extensions: when the block may clear, and how well it matched.
	ClearsAt     string   `json:"clears_at,omitempty"`
	Confidence   float64  `json:"confidence,omitempty"`
	MatchReasons []string `json:"match_reasons,omitempty"`
	// AdoptedFrom is where an adopted capability comes from (PhysMCP proxy).
	AdoptedFrom *manifest.AdoptedFrom `json:"adopted_from,omitempty"`
	// DeviceID names another device of the mesh the entry is about;
	// Endpoint is as in Candidate.
	DeviceID string `json:"device_id,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
}

// OutcomeUnroutable is the outcome of every unroutable entry; Reason says why.
const OutcomeUnroutable = "unroutable"

// Unroutable reasons.
const (
	NoProducer        = "no_producer"
	RequirementsUnmet = "requirements_unmet"
	MalformedRequest  = "malformed_request"
)

// Unroutable explains why an intent could not be routed at all: Outcome is
// always "unroutable", Reason one of no_producer, requirements_unmet,
// malformed_request.
type Unroutable struct {
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
	Detail  string `json:"detail"`
}

// ReportContext is what a caller should look at before acting.
type ReportContext struct {
	RelatedReads        []string       `json:"related_reads"`
	CurrentObservations map[string]any `json:"current_observations"`
}

// ReportMetadata describes the report itself.
type ReportMetadata struct {
	Timestamp      string `json:"timestamp"`
	TotalLatencyMs int64  `json:"total_latency_ms"`
	// Extensions.
	DeviceID   string `json:"device_id,omitempty"`
	PromcpBase string `json:"promcp_base,omitempty"`
	// Omitted says what the cap on candidates, blocked entries and related
	// reads left out; nil when nothing was.
	Omitted *Omitted `json:"omitted,omitempty"`
	// Mesh is how a mesh node coordinated the query (PhysMCP); nil on a
	// device that is not in a mesh.
	*MeshMetadata
}

// MeshMetadata is PhysMCP's account of a distributed can_do, inlined in the
// report's metadata.
type MeshMetadata struct {
	// CoordinatorNode is the node that received the query and merged the answers.
	CoordinatorNode string `json:"coordinator_node"`
	// TTLUsed is how many hops the query travelled beyond the coordinator.
	TTLUsed int `json:"ttl_used"`
	// FanoutUsed is how many peers the coordinator asked itself.
	FanoutUsed int `json:"fanout_used"`
	// PeersConsulted counts every node asked, over all hops.
	PeersConsulted    int `json:"peers_consulted"`
	ResponsesReceived int `json:"responses_received"`
	// ResponsesDroppedLate counts the peers that did not answer by the deadline.
	ResponsesDroppedLate int    `json:"responses_dropped_late"`
	MeshSizeEstimate     int    `json:"mesh_size_estimate"`
	PartitionState       string `json:"partition_state"`
	// DuplicateQuery marks a peer's empty answer to a query it answered
	// already on another path (physmcpd); never on a merged report.
	DuplicateQuery bool `json:"duplicate_query,omitempty"`
}

// CapabilityReport is can_do's answer.
type CapabilityReport struct {
	QueryID    string         `json:"query_id"`
	Feasible   bool           `json:"feasible"`
	Candidates []Candidate    `json:"candidates"`
	Blocked    []Blocked      `json:"blocked"`
	Unroutable []Unroutable   `json:"unroutable"`
	Context    ReportContext  `json:"context"`
	Metadata   ReportMetadata `json:"metadata"`
}
