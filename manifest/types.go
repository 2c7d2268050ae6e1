// Package manifest is the device model: what physmcp.manifest.yml says a device
// is, which buses it has and which capabilities it exposes, parsed strictly and
// validated before anything touches hardware.
package manifest

import (
	"time"

	"github.com/physmcp/physmcpd/internal/strictyaml"
)

// Positions re-exports the decoder's position record so callers can report on fields.
type Positions = strictyaml.Positions

// Manifest is one device's physmcp.manifest.yml.
type Manifest struct {
	// File is the path the manifest was read from (used in messages).
	File string `yaml:"-"`

	PhysMCPVersion string          `yaml:"physmcp_version,required"`
	Device         Device          `yaml:"device,required"`
	Network        *Network        `yaml:"network"`
	Buses          map[string]*Bus `yaml:"buses"`
	Capabilities   []*Capability   `yaml:"capabilities,required"`
	// Operations are the capabilities of kind start and sequence (operation.go).
	Operations []*Operation `yaml:"-"`
	Audit      *Audit       `yaml:"audit"`
	Telemetry  *Telemetry   `yaml:"telemetry"`
	SafeState  *SafeState   `yaml:"safe_state"`
	// Profile is full (default) or lite; the command line may override it.
	Profile string `yaml:"profile"`
	// NotServed are the capabilities adopted devices offer that are not
	// served (adopt_names.go); none in a manifest file.
	NotServed []*NotServed `yaml:"-"`

	At Positions `yaml:"-"`
}

// Device identifies the physical device.
type Device struct {
	ID               string    `yaml:"id,required"`
	Type             string    `yaml:"type,required"`
	Vendor           string    `yaml:"vendor"`
	Model            string    `yaml:"model"`
	FirmwareVersion  string    `yaml:"firmware_version"`
	HardwareRevision string    `yaml:"hardware_revision"`
	Location         *Location `yaml:"location"`
	Certification    []string  `yaml:"certification"`

	At Positions `yaml:"-"`
}

// Location places the device; zone is required when a location is given.
type Location struct {
	Zone        string       `yaml:"zone,required"`
	Area        string       `yaml:"area"`
	Coordinates *Coordinates `yaml:"coordinates"`
	Description string       `yaml:"description"`

	At Positions `yaml:"-"`
}

// Coordinates are free-form site coordinates.
type Coordinates struct {
	X float64 `yaml:"x,required"`
	Y float64 `yaml:"y,required"`
	Z float64 `yaml:"z"`

	At Positions `yaml:"-"`
}

// Network describes how the device is reached and whether it joins a mesh.
type Network struct {
	Protocols []*Protocol `yaml:"protocols"`
	Mesh      *Mesh       `yaml:"mesh"`

	At Positions `yaml:"-"`
}

// Protocol is one way to reach the device.
type Protocol struct {
	Type    string `yaml:"type,required"` // ip|serial|lora|ble
	Address string `yaml:"address"`
	MCPPort int    `yaml:"mcp_port"`
	Role    string `yaml:"role"` // native|proxy|lite

	At Positions `yaml:"-"`
}

// Mesh configures membership in the PhysMCP mesh (package mesh; docs/mesh.md).
type Mesh struct {
	Enabled             bool     `yaml:"enabled"`
	SeedPeers           []string `yaml:"seed_peers"`
	MaxPeers            int      `yaml:"max_peers"`
	HeartbeatIntervalMs int      `yaml:"heartbeat_interval_ms"`
	// BindAddress and BindPort are where gossip listens (UDP and TCP).
	BindAddress string `yaml:"bind_address"`
	BindPort    *int   `yaml:"bind_port"`
	// AdvertiseAddress is the address peers use for this node (gossip and,
	// when --http listens on every interface, the MCP endpoint).
	AdvertiseAddress string `yaml:"advertise_address"`
	MDNS             *bool  `yaml:"mdns"`
	// KeyFile holds the gossip keyring; relative to the manifest's directory.
	KeyFile string `yaml:"key_file"`

	At Positions `yaml:"-"`
}

// Audit configures the audit trail.
type Audit struct {
	Enabled       bool        `yaml:"enabled"`
	RetentionDays int         `yaml:"retention_days"`
	RemoteSink    *RemoteSink `yaml:"remote_sink"`

	At Positions `yaml:"-"`
}

// SafeState configures when physmcpd drives the actuators to their safe
// values beyond start-up and shutdown (which always happen).
type SafeState struct {
	// DeadManTimeoutMs applies the safe state when no do_* call has come for
	// this long.
	DeadManTimeoutMs int `yaml:"dead_man_timeout_ms,required"`

	At Positions `yaml:"-"`
}

// DeadManTimeout is dead_man_timeout_ms as a duration (0 without a safe_state section).
func (s *SafeState) DeadManTimeout() time.Duration {
	if s == nil {
		return 0
	}
	return time.Duration(s.DeadManTimeoutMs) * time.Millisecond
}

// RemoteSink is where audit records are also shipped.
type RemoteSink struct {
	Type    string `yaml:"type,required"`
	Address string `yaml:"address,required"`

	At Positions `yaml:"-"`
}

// Kind says whether a capability observes (read) or acts (do).
type Kind string

const (
	KindRead Kind = "read"
	KindDo   Kind = "do"
)

// DataType is the value type a capability exposes to clients.
type DataType string

const (
	TypeFloat  DataType = "float"
	TypeInt    DataType = "int"
	TypeBool   DataType = "bool"
	TypeString DataType = "string"
	TypeEnum   DataType = "enum"
)

// Role orders callers: none < operator < supervisor < admin.
type Role string

const (
	RoleNone Role = "none"
	// RoleViewer ranks with none but never writes: read_* and can_do only.
	// It is the default role of serial peers (policy identity.serial_role).
	RoleViewer     Role = "viewer"
	RoleOperator   Role = "operator"
	RoleSupervisor Role = "supervisor"
	RoleAdmin      Role = "admin"
)

// Rank gives the order of a role; unknown roles rank below none.
func (r Role) Rank() int {
	switch r {
	case RoleNone, RoleViewer, "":
		return 0
	case RoleOperator:
		return 1
	case RoleSupervisor:
		return 2
	case RoleAdmin:
		return 3
	}
	return -1
}

// AtLeast reports whether r satisfies a minimum role.
func (r Role) AtLeast(min Role) bool { return r.Rank() >= min.Rank() && r.Rank() >= 0 }

// Rate is "N per period", e.g. 6/hour.
type Rate struct {
	Count  int
	Per    time.Duration
	Text   string
	Source strictyaml.Pos
}

// Range bounds a numeric capability. For do capabilities it is the hard limit
// that is never written past.
type Range struct {
	Min *float64 `yaml:"min"`
	Max *float64 `yaml:"max"`

	At Positions `yaml:"-"`
}

// Capability is one read_ or do_ tool bound to a point on a bus.
type Capability struct {
	Name               string   `yaml:"name,required"`
	Kind               Kind     `yaml:"kind,required"`
	Description        string   `yaml:"description,required"`
	Binding            Binding  `yaml:"binding,required"`
	DataType           DataType `yaml:"data_type,required"`
	Unit               string   `yaml:"unit"`
	Range              *Range   `yaml:"range"`
	EnumValues         []string `yaml:"enum_values"`
	Precision          *int     `yaml:"precision"`
	SampleRateHz       float64  `yaml:"sample_rate_hz"`
	SemanticTags       []string `yaml:"semantic_tags,required"`
	SideEffects        []string `yaml:"side_effects"`
	RateLimit          *Rate    `yaml:"rate_limit"`
	RequiresPermission Role     `yaml:"requires_permission"`
	// SourceRoles, on an adopted capability, are the only roles its source
	// admits (its tools/list _meta physmcp/roles): nil when every role from
	// RequiresPermission up does.
	SourceRoles    []Role `yaml:"-"`
	RequiresQuorum bool   `yaml:"requires_quorum"`
	QuorumSize     int    `yaml:"quorum_size"`
	CooldownMs     int    `yaml:"cooldown_ms"`
	TimeoutMs      *int   `yaml:"timeout_ms"`
	Cacheable      *bool  `yaml:"cacheable"`
	CacheTTLMs     *int   `yaml:"cache_ttl_ms"`
	// Deadband and MinUpdateIntervalMs pace the change notifications of a
	// read capability's reading (resource subscriptions).
	Deadband            *float64 `yaml:"deadband"`
	MinUpdateIntervalMs *int     `yaml:"min_update_interval_ms"`
	// Streamable gives a read capability a stream_<name> tool (docs/roadmap.md).
	Streamable  bool      `yaml:"streamable"`
	Compensable *bool     `yaml:"compensable"`
	Group       string    `yaml:"group"`
	SafeValue   any       `yaml:"safe_value"`
	Simulation  *PointSim `yaml:"simulation"`
	// Interlocks are conditions on other capabilities' readings that must
	// hold for a do capability to act (interlock.go).
	Interlocks []*Interlock `yaml:"interlocks"`
	// WritesWith, for a do capability on I2C bytes that another do
	// capability's bytes overlap, is the first of their overlapping group:
	// writes take turns, and are numbered, at its register (overlap.go).
	// Nil otherwise, and for the first itself.
	WritesWith *Capability `yaml:"-"`

	At Positions `yaml:"-"`
}

// ToolName is the MCP tool this capability becomes.
func (c *Capability) ToolName() string { return string(c.Kind) + "_" + c.Name }

// StreamTool is stream_<name>, the tool of a streamable read capability.
func (c *Capability) StreamTool() string { return "stream_" + c.Name }

// Timeout is timeout_ms with its default of 5 s.
func (c *Capability) Timeout() time.Duration {
	if c.TimeoutMs == nil {
		return 5 * time.Second
	}
	return time.Duration(*c.TimeoutMs) * time.Millisecond
}

// DefaultMinUpdateInterval is min_update_interval_ms when the manifest gives none.
const DefaultMinUpdateInterval = time.Second

// MinUpdateIntervalFloorMs is the least min_update_interval_ms accepted.
const MinUpdateIntervalFloorMs = 100

// ChangeDeadband is deadband: how far a numeric reading must move from the
// last one notified to be notified again (default 0: any change).
func (c *Capability) ChangeDeadband() float64 {
	if c.Deadband == nil {
		return 0
	}
	return *c.Deadband
}

// MinUpdateInterval is min_update_interval_ms: the least time between two
// change notifications of the reading (default DefaultMinUpdateInterval).
func (c *Capability) MinUpdateInterval() time.Duration {
	if c.MinUpdateIntervalMs == nil {
		return DefaultMinUpdateInterval
	}
	return time.Duration(*c.MinUpdateIntervalMs) * time.Millisecond
}

// CacheTTL is how long a reading counts as fresh: cache_ttl_ms (default 1 s),
// or zero when the capability is not cacheable.
func (c *Capability) CacheTTL() time.Duration {
	if c.Cacheable != nil && !*c.Cacheable {
		return 0
	}
	if c.CacheTTLMs == nil {
		return time.Second
	}
	return time.Duration(*c.CacheTTLMs) * time.Millisecond
}

// Cooldown is cooldown_ms as a duration.
func (c *Capability) Cooldown() time.Duration { return time.Duration(c.CooldownMs) * time.Millisecond }

// IsNumeric reports whether values are numbers (float or int).
func (c *Capability) IsNumeric() bool { return c.DataType == TypeFloat || c.DataType == TypeInt }

// PointSim describes how a simulated point behaves: its value over time and
// the faults it shows. Only used when the capability's bus is simulated.
type PointSim struct {
	Initial any       `yaml:"initial"`
	Noise   float64   `yaml:"noise"`
	Wave    *Waveform `yaml:"waveform"`
	// Implausible is the probability that a read returns a value outside the range.
	Implausible float64 `yaml:"implausible_rate"`
	// Follows names a do capability whose last written value this read point reports
	// (a setpoint's actual value that follows the setpoint).
	Follows string `yaml:"follows"`

	At Positions `yaml:"-"`
}

// Waveform adds a periodic signal to a simulated value.
type Waveform struct {
	Shape     string  `yaml:"shape,required"` // sine|triangle|square|sawtooth
	Amplitude float64 `yaml:"amplitude,required"`
	PeriodS   float64 `yaml:"period_s,required"`

	At Positions `yaml:"-"`
}
