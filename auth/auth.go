// Package auth establishes who an HTTP caller is: bearer tokens and client
// certificates are mapped to roles by the policy's identity section (static
// tokens stored as SHA-256 hashes, JWTs checked for issuer, audience,
// signature and expiry, certificates checked against the provider's CA) and
// emergency override tokens grant the policy's override role for a limited
// time. It also signs the state that binds a person's approval to one call.
// It knows nothing of MCP or HTTP; mcpserver applies it at the edge.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
)

// Methods by which a Principal was established.
const (
	MethodStatic   = "static"
	MethodJWT      = "jwt"
	MethodOverride = "override"
	// MethodLocal is a caller that did not authenticate because the endpoint
	// does not require it (no providers, loopback only); it has the local role.
	MethodLocal = "local"
)

// Principal is an authenticated caller.
type Principal struct {
	// Name identifies the caller in logs and the audit trail: the static
	// token's name, "jwt:" + the subject, "mtls:" + the certificate's name,
	// or "override:" + whom it was minted for.
	Name   string
	Role   manifest.Role
	Method string
	// Expires is when the credential stops being accepted (zero: never).
	Expires time.Time
	// TokenID is the override token's id (jti); empty for other methods.
	TokenID string
	// Node is the calling mesh node (the mesh credential's sub); empty for
	// other methods. A peer's request must name this node as its sender.
	Node string
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal ctx carries, if any.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// Error is why a request was not authenticated, in RFC 6750 terms: Code is
// empty when no credentials were given and "invalid_token" otherwise.
type Error struct {
	Code        string
	Description string
}

func (e *Error) Error() string {
	if e.Code == "" {
		return e.Description
	}
	return e.Code + ": " + e.Description
}

func invalid(format string, args ...any) *Error {
	return &Error{Code: "invalid_token", Description: fmt.Sprintf(format, args...)}
}

// Options configure an Authenticator.
type Options struct {
	// Now is the clock; defaults to time.Now.
	Now func() time.Time
	// DeviceID is the audience of emergency override tokens (the manifest's device.id).
	DeviceID string
	// OverrideKey verifies emergency override tokens; empty refuses them.
	OverrideKey []byte
	// Audit receives every emergency override event; nil logs them with
	// Logger at WARN. serve logs them and appends them to the audit trail.
	Audit func(AuditEvent)
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// MeshKeys is the mesh keyring (network.mesh.key_file): with the
	// policy's identity.mesh, peers' mesh credentials are accepted.
	MeshKeys [][]byte
}

// Leeway is the clock skew allowed on a JWT's exp, nbf and iat: boards
// without a real-time clock may run a little off until NTP catches up. An
// emergency override gets it on iat only: it ends exactly when it expires.
const Leeway = 60 * time.Second

// Authenticator maps bearer tokens to principals.
type Authenticator struct {
	static    []staticToken
	jwts      []*jwtVerifier
	certs     []*certVerifier
	override  *overrideVerifier
	mesh      *meshVerifier
	providers int
	now       func() time.Time
}

type staticToken struct {
	name string
	hash []byte // SHA-256 of the token
	role manifest.Role
}

// New builds the authenticator for p's identity and emergency sections. Key
// files are read now, relative to the policy file's directory; a jwt provider
// without a usable key is an error, not a provider that lets nobody in silently.
func New(p *policy.Policy, opts Options) (*Authenticator, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	a := &Authenticator{now: opts.Now}
	if p == nil {
		return a, nil
	}
	baseDir := filepath.Dir(p.File)
	if id := p.Identity; id != nil {
		for i, pr := range id.Providers {
			a.providers++
			switch pr.Type {
			case "static":
				for _, t := range pr.Tokens {
					h, err := hex.DecodeString(t.SHA256)
					if err != nil || len(h) != sha256.Size {
						return nil, fmt.Errorf("identity.providers[%d]: token %q: sha256 is not 64 hex digits", i, t.Name)
					}
					a.static = append(a.static, staticToken{name: t.Name, hash: h, role: t.Role})
				}
			case "jwt":
				v, err := newJWTVerifier(pr, baseDir)
				if err != nil {
					return nil, fmt.Errorf("identity.providers[%d] (jwt, issuer %q): %w", i, pr.Issuer, err)
				}
				a.jwts = append(a.jwts, v)
			case "mtls":
				v, err := newCertVerifier(pr, baseDir)
				if err != nil {
					return nil, fmt.Errorf("identity.providers[%d] (mtls): %w", i, err)
				}
				a.certs = append(a.certs, v)
			}
		}
	}
	if id := p.Identity; id != nil && id.Mesh != nil && len(opts.MeshKeys) > 0 {
		a.mesh = &meshVerifier{keys: opts.MeshKeys, deviceID: opts.DeviceID, role: id.Mesh.Role}
	}
	if e := p.Emergency; e != nil && len(opts.OverrideKey) > 0 {
		if err := checkOverrideKey(opts.OverrideKey); err != nil {
			return nil, err
		}
		a.override = &overrideVerifier{
			key: opts.OverrideKey, deviceID: opts.DeviceID, role: e.OverridePermission,
			ttl: time.Duration(e.OverrideTokenTTLSeconds) * time.Second, auditAll: e.AuditAllOverrides,
			audit: opts.Audit, logger: opts.Logger, now: opts.Now, seen: map[string]time.Time{},
		}
	}
	return a, nil
}

// Required reports whether HTTP callers must authenticate: the policy names
// at least one identity provider.
func (a *Authenticator) Required() bool { return a != nil && a.providers > 0 }

// Issuers lists the JWT providers' issuers (for the protected resource metadata).
func (a *Authenticator) Issuers() []string {
	var out []string
	for _, v := range a.jwts {
		out = append(out, v.issuer)
	}
	return out
}

// AuditAllOverrides reports whether every call made under an override is
// audited (the policy's emergency.audit_all_overrides).
func (a *Authenticator) AuditAllOverrides() bool {
	return a != nil && a.override != nil && a.override.auditAll
}

// AuditOverrideCall records one call made under an override principal.
func (a *Authenticator) AuditOverrideCall(p Principal, tool, remote string) {
	if a == nil || a.override == nil {
		return
	}
	a.override.emit(AuditEvent{Kind: AuditOverrideCall, Name: p.Name, TokenID: p.TokenID, Role: p.Role, Expires: p.Expires, Tool: tool, Remote: remote})
}

// ErrNoCredentials is the Error for a request without a bearer token.
var ErrNoCredentials = &Error{Description: "this endpoint requires a bearer token (Authorization: Bearer TOKEN)"}

// Authenticate checks the value of an Authorization header.
func (a *Authenticator) Authenticate(authorization string) (Principal, error) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if authorization == "" {
		return Principal{}, ErrNoCredentials
	}
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return Principal{}, invalid("the Authorization header must be \"Bearer TOKEN\"")
	}
	if p, ok := a.staticToken(token); ok {
		return p, nil
	}
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(token, claims); err != nil {
		return Principal{}, invalid("unknown token")
	}
	iss, _ := claims["iss"].(string)
	if iss == MeshIssuer {
		return a.mesh.verify(token, a.now)
	}
	if iss == OverrideIssuer {
		if a.override == nil {
			return Principal{}, invalid("emergency override tokens are not accepted here (no emergency section in the policy, or serve was started without --override-key)")
		}
		return a.override.verify(token)
	}
	var firstErr error
	for _, v := range a.jwts {
		if v.issuer != iss {
			continue
		}
		p, err := v.verify(token, a.now)
		if err == nil {
			return p, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return Principal{}, firstErr
	}
	return Principal{}, invalid("no identity provider accepts tokens from issuer %q", iss)
}

// staticToken compares the token's hash with every configured hash in
// constant time, so the time taken says nothing about which one is close.
func (a *Authenticator) staticToken(token string) (Principal, bool) {
	sum := sha256.Sum256([]byte(token))
	var found *staticToken
	for i := range a.static {
		if subtle.ConstantTimeCompare(sum[:], a.static[i].hash) == 1 {
			found = &a.static[i]
		}
	}
	if found == nil {
		return Principal{}, false
	}
	return Principal{Name: found.name, Role: found.role, Method: MethodStatic}, true
}

// describeJWTError turns the library's validation errors into the reason a
// client (and its operator) can act on.
func describeJWTError(err error) *Error {
	var own *Error // our own refusal from the key function (crit)
	switch {
	case errors.As(err, &own):
		return own
	case errors.Is(err, jwt.ErrTokenExpired):
		return invalid("the token has expired")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return invalid("the token is not meant for this server (wrong audience)")
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return invalid("the token has the wrong issuer")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return invalid("the token's signature does not verify")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return invalid("the token lacks a required claim (exp)")
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return invalid("the token is not valid yet")
	}
	return invalid("the token is not valid: %v", err)
}
