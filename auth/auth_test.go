package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/physmcp/physmcpd/policy"
)

func TestApprovalsBindOnceAndExpire(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	a := NewApprovals(func() time.Time { return now })
	call := ApprovalClaim{Tool: "do_x", Args: "d1", Key: "k", Caller: "alice", Value: []byte("21"), Previous: []byte("40")}
	state, _, err := a.Issue(call, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]ApprovalClaim{
		"other tool":   {Tool: "do_y", Args: "d1", Caller: "alice"},
		"other args":   {Tool: "do_x", Args: "d2", Caller: "alice"},
		"other caller": {Tool: "do_x", Args: "d1", Caller: "mallory"},
	} {
		if _, err := a.Redeem(state, want); !errors.Is(err, ErrApprovalMismatch) {
			t.Errorf("%s: %v", name, err)
		}
	}
	tampered := strings.Replace(state, state[:4], "AAAA", 1)
	if _, err := a.Redeem(tampered, call); !errors.Is(err, ErrApprovalForged) {
		t.Errorf("tampered: %v", err)
	}
	if _, err := a.Redeem("no-dot", call); !errors.Is(err, ErrApprovalForged) {
		t.Errorf("garbage: %v", err)
	}
	got, err := a.Redeem(state, call)
	if err != nil || got.Key != "k" || string(got.Value) != "21" || string(got.Previous) != "40" {
		t.Fatalf("redeem: %+v %v", got, err)
	}
	if _, err := a.Redeem(state, call); !errors.Is(err, ErrApprovalUsed) {
		t.Errorf("second redeem: %v", err)
	}
	late, _, _ := a.Issue(call, 30*time.Second)
	now = now.Add(30 * time.Second)
	if _, err := a.Redeem(late, call); !errors.Is(err, ErrApprovalExpired) {
		t.Errorf("expired: %v", err)
	}
	// Another process (another key) did not issue it.
	if _, err := NewApprovals(nil).Redeem(late, call); !errors.Is(err, ErrApprovalForged) {
		t.Errorf("foreign key: %v", err)
	}
}

func TestApprovalsPendingUntilRedeemedOrExpired(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	a := NewApprovals(func() time.Time { return now })
	pending := func() string {
		var tools []string
		for _, c := range a.Pending() {
			tools = append(tools, c.Tool)
		}
		return strings.Join(tools, " ")
	}
	first := ApprovalClaim{Tool: "do_x", Args: "d1", Caller: "alice"}
	state, _, err := a.Issue(first, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Issue(ApprovalClaim{Tool: "do_y", Args: "d2", Caller: "bob"}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := pending(); got != "do_y do_x" {
		t.Fatalf("pending, soonest first: %q", got)
	}
	// A refused redeem leaves it pending; the answer, accepted or declined, ends it.
	if _, err := a.Redeem(state, ApprovalClaim{Tool: "do_x", Args: "d1", Caller: "mallory"}); err == nil {
		t.Fatal("redeemed by another caller")
	}
	if got := pending(); got != "do_y do_x" {
		t.Fatalf("after a refused redeem: %q", got)
	}
	if _, err := a.Redeem(state, first); err != nil {
		t.Fatal(err)
	}
	if got := pending(); got != "do_y" {
		t.Fatalf("after the answer: %q", got)
	}
	now = now.Add(30 * time.Second)
	if got := pending(); got != "" {
		t.Fatalf("after expiry: %q", got)
	}
}

// A public-key provider accepts ES256 from the issuer and refuses a token
// that claims HS256 signed with the public key's bytes (algorithm confusion).
func TestJWTPublicKeyAndAlgorithmConfusion(t *testing.T) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "issuer.pem"), pubPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	p := &policy.Policy{File: filepath.Join(dir, "p.yml"), Identity: &policy.Identity{Providers: []*policy.Provider{
		{Type: "jwt", Issuer: "https://id", Audience: "dev", KeyFile: "issuer.pem", RoleClaim: "physmcp_role"},
	}}}
	a, err := New(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	claims := jwt.MapClaims{"iss": "https://id", "aud": "dev", "sub": "svc", "physmcp_role": "supervisor", "exp": time.Now().Add(time.Hour).Unix()}
	good, _ := jwt.NewWithClaims(jwt.SigningMethodES256, claims).SignedString(priv)
	pr, err := a.Authenticate("Bearer " + good)
	if err != nil || pr.Role != "supervisor" || pr.Name != "jwt:svc" || pr.Method != MethodJWT {
		t.Fatalf("ES256: %+v %v", pr, err)
	}
	confused, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(pubPEM)
	if _, err := a.Authenticate("Bearer " + confused); err == nil {
		t.Error("an HS256 token signed with the public key was accepted")
	}
}

func TestKeyFileErrors(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "short"), []byte("too-short\n"), 0o600)
	priv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalECPrivateKey(priv)
	os.WriteFile(filepath.Join(dir, "private.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
	for file, want := range map[string]string{"short": "too short", "private.pem": "not a public key", "missing": "no such file"} {
		p := &policy.Policy{File: filepath.Join(dir, "p.yml"), Identity: &policy.Identity{Providers: []*policy.Provider{
			{Type: "jwt", Issuer: "i", Audience: "a", KeyFile: file},
		}}}
		if _, err := New(p, Options{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", file, err, want)
		}
	}
}

func TestOverrideNeedsPolicyAndKey(t *testing.T) {
	key := NewOverrideKey()
	p := &policy.Policy{Emergency: &policy.Emergency{OverridePermission: "admin", OverrideTokenTTLSeconds: 60}}
	if _, err := MintOverride(&policy.Policy{}, "dev", key, "bob", "why", time.Now()); err == nil {
		t.Error("minted without an emergency section")
	}
	if _, err := MintOverride(p, "dev", key[:10], "bob", "why", time.Now()); err == nil {
		t.Error("minted with a short key")
	}
	o, err := MintOverride(p, "dev", key, "bob", "why", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var events []AuditEvent
	other, _ := New(p, Options{DeviceID: "other-device", OverrideKey: key, Audit: func(e AuditEvent) { events = append(events, e) }})
	if _, err := other.Authenticate("Bearer " + o.Token); err == nil {
		t.Error("an override for another device was accepted")
	}
	if len(events) != 1 || events[0].Kind != AuditOverrideRefused {
		t.Errorf("refusal not audited: %+v", events)
	}
	none, _ := New(p, Options{DeviceID: "dev"})
	if _, err := none.Authenticate("Bearer " + o.Token); err == nil {
		t.Error("an override was accepted without --override-key")
	}
}
