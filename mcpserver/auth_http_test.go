//go:build !lite

package mcpserver_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/policy"
)

const (
	jwtSecret = "an-hmac-secret-of-at-least-thirty-two-bytes"
	jwtIssuer = "https://id.example.test"
	jwtAud    = "physmcpd-boiler"
)

// authPolicy names static tokens, a JWT issuer (its secret in key_file) and
// emergency overrides.
func authPolicy(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf(`physmcp_policy_version: "0.1"
identity:
  local_role: admin
  providers:
    - type: static
      tokens:
        - {name: viewer, sha256: %s, role: none}
        - {name: operator, sha256: %s, role: operator}
    - type: jwt
      issuer: %s
      audience: %s
      key_file: jwt.key
emergency: {override_permission: admin, override_token_ttl_seconds: 600, audit_all_overrides: true}
`, policy.HashToken("viewer-token"), policy.HashToken("operator-token"), jwtIssuer, jwtAud)
}

func startAuthDevice(t *testing.T, overrideKey []byte) *accessDevice {
	t.Helper()
	return startAccessDevice(t, authPolicy(t), map[string]string{"jwt.key": jwtSecret + "\n"}, overrideKey, 4096)
}

func signJWT(t *testing.T, secret string, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func jwtClaims(now time.Time) jwt.MapClaims {
	return jwt.MapClaims{"iss": jwtIssuer, "aud": jwtAud, "sub": "alice", "role": "operator",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
}

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`

func post(t *testing.T, url, body string, headers map[string]string) (*http.Response, string) {
	t.Helper()
	return postWith(t, http.DefaultClient, url, body, headers)
}

func postWith(t *testing.T, hc *http.Client, url, body string, headers map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// No token, a bad token, a JWT for another audience, expired, badly signed
// or without a role: 401 with the RFC 6750 challenge pointing at the RFC 9728
// metadata. A good static token or JWT gets through.
func TestHTTPAuthentication(t *testing.T) {
	d := startAuthDevice(t, nil)
	now := d.clock.Now()
	wrongAud := jwtClaims(now)
	wrongAud["aud"] = "another-server"
	expired := jwtClaims(now)
	expired["iat"], expired["exp"] = now.Add(-3*time.Hour).Unix(), now.Add(-2*time.Hour).Unix()
	noRole := jwtClaims(now)
	delete(noRole, "role")
	cases := []struct {
		name, authz string
		status      int
		want        string // in WWW-Authenticate
	}{
		{"no token", "", 401, `Bearer resource_metadata="` + d.url + mcpserver.ProtectedResourcePath + mcpserver.EndpointPath + `"`},
		{"unknown token", "Bearer nope", 401, `error="invalid_token"`},
		{"not bearer", "Basic dXNlcjpwdw==", 401, `error="invalid_token"`},
		{"jwt wrong audience", "Bearer " + signJWT(t, jwtSecret, wrongAud), 401, "wrong audience"},
		{"jwt expired", "Bearer " + signJWT(t, jwtSecret, expired), 401, "expired"},
		{"jwt bad signature", "Bearer " + signJWT(t, jwtSecret+"x", jwtClaims(now)), 401, "signature"},
		{"jwt without role", "Bearer " + signJWT(t, jwtSecret, noRole), 401, "no 'role' claim"},
		{"static token", "Bearer operator-token", 200, ""},
		{"jwt", "Bearer " + signJWT(t, jwtSecret, jwtClaims(now)), 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			headers := map[string]string{}
			if c.authz != "" {
				headers["Authorization"] = c.authz
			}
			resp, body := post(t, d.url+mcpserver.EndpointPath, initializeBody, headers)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, body)
			}
			challenge := resp.Header.Get("WWW-Authenticate")
			if c.status == 401 {
				if !strings.Contains(challenge, "resource_metadata=") || !strings.Contains(challenge, c.want) {
					t.Errorf("WWW-Authenticate %q lacks %q", challenge, c.want)
				}
				if c.authz == "" && strings.Contains(challenge, "error=") {
					t.Errorf("a request without credentials gets no error code (RFC 6750 §3.1): %q", challenge)
				}
			}
		})
	}
}

func TestHTTPProtectedResourceMetadata(t *testing.T) {
	d := startAuthDevice(t, nil)
	for _, path := range []string{mcpserver.ProtectedResourcePath, mcpserver.ProtectedResourcePath + mcpserver.EndpointPath} {
		resp, err := http.Get(d.url + path)
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Resource string   `json:"resource"`
			Servers  []string `json:"authorization_servers"`
			Methods  []string `json:"bearer_methods_supported"`
		}
		err = json.NewDecoder(resp.Body).Decode(&meta)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %v", path, resp.StatusCode, err)
		}
		want := d.url + strings.TrimPrefix(path, mcpserver.ProtectedResourcePath)
		if meta.Resource != want || !slices.Equal(meta.Servers, []string{jwtIssuer}) || !slices.Equal(meta.Methods, []string{"header"}) {
			t.Errorf("%s: %+v, want resource %s", path, meta, want)
		}
	}
}

// Static tokens name no authorization server: no metadata to send OAuth
// clients into a login that cannot work, and a 401 that names the realm only.
func TestHTTPNoMetadataWithoutAuthorizationServer(t *testing.T) {
	d := startAccessDevice(t, fmt.Sprintf(`physmcp_policy_version: "0.1"
identity:
  providers:
    - type: static
      tokens:
        - {name: operator, sha256: %s, role: operator}
`, policy.HashToken("operator-token")), nil, nil, 4096)
	resp, _ := post(t, d.url+mcpserver.EndpointPath, initializeBody, nil)
	if challenge := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != 401 || challenge != `Bearer realm="physmcpd"` {
		t.Fatalf("no token: %d %q", resp.StatusCode, challenge)
	}
	for _, path := range []string{mcpserver.ProtectedResourcePath, mcpserver.ProtectedResourcePath + mcpserver.EndpointPath} {
		resp, err := http.Get(d.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("%s: %d, want 404", path, resp.StatusCode)
		}
	}
	if resp, _ := post(t, d.url+mcpserver.EndpointPath, initializeBody, map[string]string{"Authorization": "Bearer operator-token"}); resp.StatusCode != 200 {
		t.Fatalf("with the token: %d", resp.StatusCode)
	}
}

// A viewer does not see do_ tools, and calling one anyway is 403 with
// permission_insufficient and no write; an operator sees it and writes.
func TestHTTPRoles(t *testing.T) {
	d := startAuthDevice(t, nil)
	viewer := d.connect(t, map[string]string{"Authorization": "Bearer viewer-token"}, nil)
	if names := toolNames(t, viewer); slices.Contains(names, "do_boiler_setpoint") || !slices.Contains(names, "read_boiler_setpoint") {
		t.Errorf("viewer sees %v", names)
	}
	if _, err := callDo(t, viewer, "do_boiler_setpoint", map[string]any{"value": 50}); err == nil {
		t.Error("viewer's do_ call succeeded")
	}
	resp, body := post(t, d.url+mcpserver.EndpointPath,
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"do_boiler_setpoint","arguments":{"value":50}}}`,
		map[string]string{"Authorization": "Bearer viewer-token"})
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "permission_insufficient") || !strings.Contains(body, `"id":7`) {
		t.Errorf("viewer tools/call: %d %s", resp.StatusCode, body)
	}
	if n := d.bus.writes.Load(); n != 0 {
		t.Fatalf("%d writes after the viewer's calls", n)
	}

	operator := d.connect(t, map[string]string{"Authorization": "Bearer operator-token"}, nil)
	if names := toolNames(t, operator); !slices.Contains(names, "do_boiler_setpoint") {
		t.Errorf("operator sees %v", names)
	}
	res, err := callDo(t, operator, "do_boiler_setpoint", map[string]any{"value": 50})
	if err != nil || res.IsError {
		t.Fatalf("operator's do_: %v %+v", err, res)
	}
	if n := d.bus.writes.Load(); n != 1 {
		t.Errorf("%d writes after the operator's call, want 1", n)
	}
}

func TestHTTPOriginAndBodyLimit(t *testing.T) {
	d := startAuthDevice(t, nil)
	op := map[string]string{"Authorization": "Bearer operator-token"}
	for origin, want := range map[string]int{"http://evil.example": 403, "null": 403, "http://localhost:6274": 200, d.url: 200} {
		h := map[string]string{"Origin": origin}
		for k, v := range op {
			h[k] = v
		}
		if resp, body := post(t, d.url+mcpserver.EndpointPath, initializeBody, h); resp.StatusCode != want {
			t.Errorf("Origin %s: %d, want %d: %s", origin, resp.StatusCode, want, body)
		}
	}
	// A foreign origin is refused before credentials are even looked at.
	if resp, _ := post(t, d.url+mcpserver.EndpointPath, initializeBody, map[string]string{"Origin": "https://evil.example"}); resp.StatusCode != 403 {
		t.Errorf("foreign Origin without a token: %d, want 403", resp.StatusCode)
	}
	big := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("x", 5000) + `"}}`
	if resp, body := post(t, d.url+mcpserver.EndpointPath, big, op); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %d %s", resp.StatusCode, body)
	}
}

// An emergency override grants the policy's role until its TTL runs out, and
// every use is audited.
func TestHTTPEmergencyOverride(t *testing.T) {
	key := auth.NewOverrideKey()
	d := startAuthDevice(t, key)
	m := loadAccessManifest(t)
	p, diags := policy.Parse("p.yml", []byte(authPolicy(t)), m)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	o, err := auth.MintOverride(p, m.Device.ID, key, "bob", "setpoint stuck", d.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	bearer := map[string]string{"Authorization": "Bearer " + o.Token}
	c := d.connect(t, bearer, nil)
	if res, err := callDo(t, c, "do_boiler_setpoint", map[string]any{"value": 60}); err != nil || res.IsError {
		t.Fatalf("override do_: %v %+v", err, res)
	}
	var kinds []string
	for len(d.audit) > 0 {
		ev := <-d.audit
		kinds = append(kinds, ev.Kind)
		if ev.Name != "override:bob" || ev.Role != "admin" {
			t.Errorf("audit event %+v", ev)
		}
	}
	used := 0
	for _, k := range kinds {
		if k == auth.AuditOverrideUsed {
			used++
		}
	}
	if used != 1 || !slices.Contains(kinds, auth.AuditOverrideCall) {
		t.Errorf("audit events %v: want one %s and the %s", kinds, auth.AuditOverrideUsed, auth.AuditOverrideCall)
	}
	d.clock.Advance(600*time.Second + 2*auth.Leeway)
	if resp, body := post(t, d.url+mcpserver.EndpointPath, initializeBody, bearer); resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "expired") {
		t.Errorf("expired override: %d %s %q", resp.StatusCode, body, resp.Header.Get("WWW-Authenticate"))
	}
}
