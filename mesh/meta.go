package mesh

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/physmcp/physmcpd/manifest"
)

// TagDigest is a 256-bit Bloom filter over a device's match words (see
// MatchWords): for each word w, bits b0, b1 and b2 are set, where b0..b2 are
// the first three bytes of SHA-256(w). A peer whose digest lacks a word
// certainly does not have it; one that has all three bits probably does
// (about 2.6 % false positives at 30 words). It lets a coordinator pick the
// peers worth asking without fetching their manifests.
type TagDigest [32]byte

// Add sets the bits of word (lowercased).
func (d *TagDigest) Add(word string) {
	sum := sha256.Sum256([]byte(strings.ToLower(word)))
	for _, b := range sum[:3] {
		d[b/8] |= 1 << (b % 8)
	}
}

// MayHave reports whether word may be among the digested words; false is certain.
func (d TagDigest) MayHave(word string) bool {
	sum := sha256.Sum256([]byte(strings.ToLower(word)))
	for _, b := range sum[:3] {
		if d[b/8]&(1<<(b%8)) == 0 {
			return false
		}
	}
	return true
}

// MayHaveAny reports whether any of words may be digested.
func (d TagDigest) MayHaveAny(words []string) bool {
	return slices.ContainsFunc(words, d.MayHave)
}

// MarshalText encodes the digest as unpadded base64url (43 characters).
func (d TagDigest) MarshalText() ([]byte, error) {
	return []byte(base64.RawURLEncoding.EncodeToString(d[:])), nil
}

// UnmarshalText decodes MarshalText's form.
func (d *TagDigest) UnmarshalText(b []byte) error {
	raw, err := base64.RawURLEncoding.DecodeString(string(b))
	if err != nil {
		return fmt.Errorf("tag digest: %v", err)
	}
	if len(raw) != len(d) {
		return fmt.Errorf("tag digest: %d bytes, want %d", len(raw), len(d))
	}
	copy(d[:], raw)
	return nil
}

// LocationPrefix marks location words in a TagDigest, so a location word
// never matches a tag of the same spelling.
const LocationPrefix = "loc:"

// MatchWords are the words can_do matches an intent against on this device,
// lowercased: every capability's semantic_tags and the words of its name,
// and, prefixed with LocationPrefix, the device's zone and area as written
// and the words of its zone, area and description.
func MatchWords(m *manifest.Manifest) []string {
	var out []string
	for _, c := range m.Capabilities {
		for _, t := range c.SemanticTags {
			out = append(out, strings.ToLower(t))
		}
		out = append(out, Words(c.Name)...)
	}
	if loc := m.Device.Location; loc != nil {
		for _, s := range []string{loc.Zone, loc.Area} {
			if s != "" {
				out = append(out, LocationPrefix+strings.ToLower(s))
			}
		}
		for _, s := range []string{loc.Zone, loc.Area, loc.Description} {
			for _, w := range Words(s) {
				out = append(out, LocationPrefix+w)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Words splits s into lowercase runs of letters and digits, as can_do does.
func Words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	})
}

// Digest is the TagDigest of words.
func Digest(words []string) TagDigest {
	var d TagDigest
	for _, w := range words {
		d.Add(w)
	}
	return d
}

// Document is what physmcp/manifest answers: the device and a summary of
// each capability, without buses and bindings (where the hardware sits on
// which bus is nobody else's business), and the capabilities hash over it.
type Document struct {
	PhysMCPVersion string          `json:"physmcp_version"`
	Device         DocumentDevice  `json:"device"`
	Profile        string          `json:"profile"`
	Capabilities   []CapabilityDoc `json:"capabilities"`
	CapsHash       string          `json:"capabilities_hash"`
}

// DocumentDevice is the device section of a Document.
type DocumentDevice struct {
	ID       string            `json:"id"`
	Type     string            `json:"type"`
	Vendor   string            `json:"vendor,omitempty"`
	Model    string            `json:"model,omitempty"`
	Location *DocumentLocation `json:"location,omitempty"`
	// Descriptive fields: the daemon shows them and acts on none of them.
	FirmwareVersion  string   `json:"firmware_version,omitempty"`
	HardwareRevision string   `json:"hardware_revision,omitempty"`
	Certification    []string `json:"certification,omitempty"`
	// Protocols are how clients reach the device.
	Protocols []DocumentProtocol `json:"protocols,omitempty"`
}

// DocumentProtocol is one way to reach the device (network.protocols, which
// serve holds to the transport it serves, or, without them, that transport).
type DocumentProtocol struct {
	Type    string `json:"type"`
	Address string `json:"address,omitempty"`
	MCPPort int    `json:"mcp_port,omitempty"`
	Role    string `json:"role,omitempty"`
}

// DocumentLocation is where the device is.
type DocumentLocation struct {
	Zone        string `json:"zone"`
	Area        string `json:"area,omitempty"`
	Description string `json:"description,omitempty"`
}

// CapabilityDoc summarises one capability: what a peer needs to route an
// intent and to tell whether an answer could be right.
type CapabilityDoc struct {
	Name               string        `json:"name"`
	Kind               manifest.Kind `json:"kind"`
	Description        string        `json:"description"`
	DataType           string        `json:"data_type"`
	Unit               string        `json:"unit,omitempty"`
	Min                *float64      `json:"min,omitempty"`
	Max                *float64      `json:"max,omitempty"`
	EnumValues         []string      `json:"enum_values,omitempty"`
	SemanticTags       []string      `json:"semantic_tags"`
	SideEffects        []string      `json:"side_effects,omitempty"`
	RequiresPermission manifest.Role `json:"requires_permission,omitempty"`
	// Roles, when some role above RequiresPermission is refused, lists
	// those that pass.
	Roles          []string `json:"roles,omitempty"`
	RequiresQuorum bool     `json:"requires_quorum,omitempty"`
}

// Roles is what a call of a tool asks of the caller's role, policy
// included (engine.Engine.Roles): the lowest role that passes, and every
// role that does when some role above it is refused.
type Roles func(tool string) (min string, roles []string)

// Describe builds m's Document under profile, each capability's required
// permission as roles says (nil: the manifest's alone). CapsHash is the
// first 16 bytes of SHA-256 over the JSON encoding of Capabilities, in hex:
// any change a peer could act on (a capability added, a range, a tag or
// the roles it asks changed) changes it, and a peer that sees it change
// fetches the document again (an aggregator lists the device's tools again,
// and asks the roles they now ask).
func Describe(m *manifest.Manifest, profile string, roles Roles) Document {
	doc := Document{
		PhysMCPVersion: m.PhysMCPVersion,
		Device: DocumentDevice{ID: m.Device.ID, Type: m.Device.Type, Vendor: m.Device.Vendor, Model: m.Device.Model,
			FirmwareVersion: m.Device.FirmwareVersion, HardwareRevision: m.Device.HardwareRevision, Certification: m.Device.Certification},
		Profile:      profile,
		Capabilities: []CapabilityDoc{},
	}
	if loc := m.Device.Location; loc != nil {
		doc.Device.Location = &DocumentLocation{Zone: loc.Zone, Area: loc.Area, Description: loc.Description}
	}
	if m.Network != nil {
		for _, p := range m.Network.Protocols {
			doc.Device.Protocols = append(doc.Device.Protocols, DocumentProtocol{Type: p.Type, Address: p.Address, MCPPort: p.MCPPort, Role: p.Role})
		}
	}
	for _, c := range m.Capabilities {
		cd := CapabilityDoc{Name: c.Name, Kind: c.Kind, Description: c.Description, DataType: string(c.DataType), Unit: c.Unit,
			EnumValues: c.EnumValues, SemanticTags: c.SemanticTags, SideEffects: c.SideEffects,
			RequiresPermission: c.RequiresPermission, RequiresQuorum: c.RequiresQuorum}
		if c.Range != nil {
			cd.Min, cd.Max = c.Range.Min, c.Range.Max
		}
		if roles != nil {
			min, only := roles(c.ToolName())
			if r := manifest.Role(min); r.Rank() > cd.RequiresPermission.Rank() {
				cd.RequiresPermission = r
			}
			cd.Roles = only
		}
		doc.Capabilities = append(doc.Capabilities, cd)
	}
	b, _ := json.Marshal(doc.Capabilities) // plain structs: cannot fail
	sum := sha256.Sum256(b)
	doc.CapsHash = hex.EncodeToString(sum[:16])
	return doc
}

// metaVersion is the layout of nodeMeta; a node refuses peers of another.
const metaVersion = 1

// MaxMetaBytes is memberlist's limit on node metadata.
const MaxMetaBytes = 512

// nodeMeta is what a node gossips about itself (memberlist NodeMeta), as
// compact JSON: short keys keep it well under MaxMetaBytes.
type nodeMeta struct {
	V        int       `json:"v"`
	Device   string    `json:"d"`
	Zone     string    `json:"z,omitempty"`
	Profile  string    `json:"p,omitempty"`
	Endpoint string    `json:"e,omitempty"`
	CapsHash string    `json:"c,omitempty"`
	Tags     TagDigest `json:"t"`
}

func (nm nodeMeta) encode() ([]byte, error) {
	b, err := json.Marshal(nm)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxMetaBytes {
		return nil, fmt.Errorf("node metadata is %d bytes, over memberlist's %d (is the endpoint URL or the device id very long?)", len(b), MaxMetaBytes)
	}
	return b, nil
}

func decodeMeta(b []byte) (nodeMeta, error) {
	var nm nodeMeta
	if len(b) == 0 {
		return nm, errors.New("no metadata: not a physmcpd node")
	}
	if err := json.Unmarshal(b, &nm); err != nil {
		return nm, fmt.Errorf("metadata: %v", err)
	}
	if nm.V != metaVersion {
		return nm, fmt.Errorf("metadata version %d, this node reads %d", nm.V, metaVersion)
	}
	if nm.Device == "" {
		return nm, errors.New("metadata names no device")
	}
	return nm, nil
}
