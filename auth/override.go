package auth

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
)

// OverrideIssuer is the iss of emergency override tokens.
const OverrideIssuer = "physmcpd-override"

// Audit event kinds for emergency overrides.
const (
	AuditOverrideMinted  = "override_minted"
	AuditOverrideUsed    = "override_used"    // first request authenticated by a token
	AuditOverrideCall    = "override_call"    // a tool call under an override (audit_all_overrides)
	AuditOverrideRefused = "override_refused" // a token that carried the override issuer but failed
)

// AuditEvent is one emergency override event. Overrides are always audited.
type AuditEvent struct {
	Kind    string        `json:"override_event"`
	Name    string        `json:"name"` // whom the override was minted for
	Reason  string        `json:"reason,omitempty"`
	TokenID string        `json:"token_id,omitempty"`
	Role    manifest.Role `json:"role,omitempty"`
	Expires time.Time     `json:"expires"`
	Tool    string        `json:"tool,omitempty"`   // override_call
	Remote  string        `json:"remote,omitempty"` // the HTTP peer, when known
	Detail  string        `json:"detail,omitempty"` // override_refused
}

// LogAudit writes override events to the log at WARN, so they are never
// silent even where no audit trail is kept.
func LogAudit(logger *slog.Logger) func(AuditEvent) {
	return func(e AuditEvent) {
		logger.Warn("AUDIT emergency override", "event", e.Kind, "name", e.Name, "token_id", e.TokenID, "role", e.Role,
			"expires", e.Expires.UTC().Format(time.RFC3339), "reason", e.Reason, "tool", e.Tool, "remote", e.Remote, "detail", e.Detail)
	}
}

type overrideClaims struct {
	Reason string `json:"reason,omitempty"`
	jwt.RegisteredClaims
}

// Override is a minted emergency override token.
type Override struct {
	Token   string
	ID      string
	Role    manifest.Role
	Expires time.Time
}

func checkOverrideKey(key []byte) error {
	if len(key) < MinSecretBytes {
		return fmt.Errorf("the override key has %d bytes; it needs at least %d (physmcpd token override creates one)", len(key), MinSecretBytes)
	}
	return nil
}

// NewOverrideKey returns a fresh override signing key, hex-encoded for a key file.
func NewOverrideKey() []byte {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand)
	return []byte(hex.EncodeToString(b))
}

// MintOverride signs an emergency override token for deviceID under p's
// emergency section: it grants override_permission for
// override_token_ttl_seconds from now. name says whom it is for and reason
// why; both go to the audit trail.
func MintOverride(p *policy.Policy, deviceID string, key []byte, name, reason string, now time.Time) (Override, error) {
	if p == nil || p.Emergency == nil {
		return Override{}, errors.New("the policy has no emergency section, so it allows no overrides")
	}
	if err := checkOverrideKey(key); err != nil {
		return Override{}, err
	}
	if name == "" || reason == "" {
		return Override{}, errors.New("an override needs the name of who uses it and the reason (both are audited)")
	}
	e := p.Emergency
	idBytes := make([]byte, 16)
	rand.Read(idBytes)
	o := Override{ID: hex.EncodeToString(idBytes), Role: e.OverridePermission,
		Expires: now.Add(time.Duration(e.OverrideTokenTTLSeconds) * time.Second).Truncate(time.Second)}
	claims := overrideClaims{Reason: reason, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: OverrideIssuer, Subject: name, Audience: jwt.ClaimStrings{deviceID}, ID: o.ID,
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(o.Expires),
	}}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
	if err != nil {
		return Override{}, err
	}
	o.Token = tok
	return o, nil
}

type overrideVerifier struct {
	key      []byte
	deviceID string
	role     manifest.Role
	ttl      time.Duration
	auditAll bool
	audit    func(AuditEvent)
	logger   *slog.Logger
	now      func() time.Time

	mu   sync.Mutex
	seen map[string]time.Time // token ids already audited as used, until they expire
}

func (o *overrideVerifier) emit(e AuditEvent) {
	if o.audit != nil {
		o.audit(e)
		return
	}
	LogAudit(o.logger)(e)
}

// verify checks an override token. The role comes from the policy in force,
// not from the token, and the policy's TTL bounds the token's life even if it
// was minted under a longer one.
//
// An override ends exactly at its exp, or at iat + the policy's TTL if that is
// sooner: the clock-skew Leeway is for an issuer's clock, and must not give an
// emergency grant of a higher role an extra minute. The library still applies
// Leeway to iat, so a token minted on a host whose clock runs slightly ahead
// is usable at once; that moves its start, never its end.
func (o *overrideVerifier) verify(token string) (Principal, error) {
	var c overrideClaims
	_, err := jwt.ParseWithClaims(token, &c, keyWithoutCrit(o.key),
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer(OverrideIssuer), jwt.WithAudience(o.deviceID),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithTimeFunc(o.now), jwt.WithLeeway(Leeway))
	now := o.now()
	var refused *Error
	switch {
	case err != nil:
		refused = describeJWTError(err)
	case c.IssuedAt == nil:
		refused = invalid("the override token has no iat")
	case !now.Before(c.ExpiresAt.Time):
		refused = invalid("the token has expired")
	case !now.Before(c.IssuedAt.Add(o.ttl)):
		refused = invalid("the override has outlived the policy's override_token_ttl_seconds (%s)", o.ttl)
	}
	if refused != nil {
		o.emit(AuditEvent{Kind: AuditOverrideRefused, Name: c.Subject, TokenID: c.ID, Reason: c.Reason, Detail: refused.Description})
		return Principal{}, refused
	}
	expires := c.ExpiresAt.Time
	if end := c.IssuedAt.Add(o.ttl); end.Before(expires) {
		expires = end
	}
	p := Principal{Name: "override:" + c.Subject, Role: o.role, Method: MethodOverride, Expires: expires, TokenID: c.ID}
	o.mu.Lock()
	for id, exp := range o.seen {
		if !now.Before(exp) {
			delete(o.seen, id)
		}
	}
	_, seen := o.seen[c.ID]
	o.seen[c.ID] = p.Expires
	o.mu.Unlock()
	if !seen {
		o.emit(AuditEvent{Kind: AuditOverrideUsed, Name: p.Name, TokenID: c.ID, Role: p.Role, Expires: p.Expires, Reason: c.Reason})
	}
	return p, nil
}
