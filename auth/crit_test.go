package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/physmcp/physmcpd/policy"
)

// RFC 7515 §4.1.11: a token whose header has "crit" names extensions this
// server must understand; it understands none, so any crit is refused, for
// access tokens and emergency overrides alike. The same tokens without crit
// are accepted, so the refusal is the crit and nothing else.
func TestJWTWithCritRefused(t *testing.T) {
	secret := []byte(strings.Repeat("s", MinSecretBytes))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret"), secret, 0o600); err != nil {
		t.Fatal(err)
	}
	overrideKey := NewOverrideKey()
	p := &policy.Policy{
		File: filepath.Join(dir, "p.yml"),
		Identity: &policy.Identity{Providers: []*policy.Provider{
			{Type: "jwt", Issuer: "https://id", Audience: "dev", KeyFile: "secret"},
		}},
		Emergency: &policy.Emergency{OverridePermission: "admin", OverrideTokenTTLSeconds: 600},
	}
	var refused []AuditEvent
	a, err := New(p, Options{DeviceID: "dev", OverrideKey: overrideKey, Audit: func(e AuditEvent) {
		if e.Kind == AuditOverrideRefused {
			refused = append(refused, e)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tokens := map[string]struct {
		claims jwt.MapClaims
		key    []byte
	}{
		"access": {jwt.MapClaims{"iss": "https://id", "aud": "dev", "sub": "svc", "role": "operator", "exp": now.Add(time.Hour).Unix()}, secret},
		"override": {jwt.MapClaims{"iss": OverrideIssuer, "aud": "dev", "sub": "bob", "jti": "j1", "reason": "r",
			"iat": now.Unix(), "exp": now.Add(time.Minute).Unix()}, overrideKey},
	}
	crits := map[string]struct {
		crit any
		want string
	}{
		"unknown extension": {[]string{"b64"}, "does not understand (crit: b64)"},
		"several":           {[]string{"exp", "x-vendor"}, "does not understand (crit: exp, x-vendor)"},
		"empty list":        {[]string{}, "malformed"},
		"not a list":        {"b64", "malformed"},
		"not names":         {[]any{"b64", 7}, "malformed"},
		"empty name":        {[]string{""}, "malformed"},
		"null":              {nil, "malformed"},
	}
	sign := func(claims jwt.MapClaims, key []byte, header map[string]any) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
		for k, v := range header {
			tok.Header[k] = v
		}
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for kind, tk := range tokens {
		if _, err := a.Authenticate("Bearer " + sign(tk.claims, tk.key, nil)); err != nil {
			t.Fatalf("%s token without crit: %v", kind, err)
		}
		for name, c := range crits {
			_, err := a.Authenticate("Bearer " + sign(tk.claims, tk.key, map[string]any{"crit": c.crit}))
			var authErr *Error
			if err == nil || !errors.As(err, &authErr) || authErr.Code != "invalid_token" || !strings.Contains(authErr.Description, c.want) {
				t.Errorf("%s token, crit %s: %v, want invalid_token %q", kind, name, err, c.want)
			}
		}
	}
	if len(refused) != len(crits) {
		t.Errorf("%d override refusals audited, want %d", len(refused), len(crits))
	}
}
