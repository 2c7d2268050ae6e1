package auth

import (
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
)

// A mesh credential is accepted only signed with a key of this node's
// keyring (the second key of a ring being rotated included), for this
// device, unexpired, naming the calling node, and only when the policy
// gives mesh peers a role.
func TestMeshCredentials(t *testing.T) {
	ring := [][]byte{[]byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210")}
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	p := &policy.Policy{Identity: &policy.Identity{Mesh: &policy.MeshIdentity{Role: manifest.Role("operator")}}}
	a, err := New(p, Options{DeviceID: "pump", MeshKeys: ring, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	mint := func(keys [][]byte, aud string, at time.Time) string {
		tok, _, err := MeshCredential(keys, "greenhouse", aud, at)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + tok
	}
	good := mint(ring, "pump", now)
	if !a.MeshBearer(good) {
		t.Fatal("MeshBearer does not recognise a mesh credential")
	}
	pr, err := a.Authenticate(good)
	if err != nil || pr.Name != "mesh:greenhouse" || pr.Node != "greenhouse" || pr.Role != "operator" || pr.Method != MethodMesh {
		t.Fatalf("good credential: %+v, %v", pr, err)
	}
	if _, err := a.Authenticate(mint(ring[1:], "pump", now)); err != nil {
		t.Errorf("signed with the ring's second key: %v", err)
	}
	// Signed with the ring's key, but naming no calling node: a peer could
	// not hold the caller to the node its request names.
	anonymous, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Issuer: MeshIssuer, Audience: jwt.ClaimStrings{"pump"},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Minute)),
	}).SignedString(meshSigningKey(ring[0]))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ header, want string }{
		"another keyring": {mint([][]byte{[]byte("another key of the right length!")}, "pump", now), "keyring"},
		"another device":  {mint(ring, "valve", now), "aud"},
		"expired":         {mint(ring, "pump", now.Add(-10*time.Minute)), "expired"},
		"no calling node": {"Bearer " + anonymous, "names no calling node (sub)"},
	} {
		if _, err := a.Authenticate(tc.header); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one mentioning %q", name, err, tc.want)
		}
	}
	// The device the credential was minted for accepts it, another refuses it.
	valve, err := New(p, Options{DeviceID: "valve", MeshKeys: ring, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := valve.Authenticate(mint(ring, "valve", now)); err != nil {
		t.Errorf("valve refuses a credential minted for valve: %v", err)
	}
	if _, err := valve.Authenticate(good); err == nil || !strings.Contains(err.Error(), "aud") {
		t.Errorf("valve accepts pump's credential: err %v", err)
	}
	if _, _, err := MeshCredential(ring, "", "pump", now); err == nil {
		t.Error("a credential naming no calling node was minted")
	}
	noMesh, _ := New(&policy.Policy{}, Options{DeviceID: "pump", MeshKeys: ring})
	if _, err := noMesh.Authenticate(good); err == nil || !strings.Contains(err.Error(), "identity.mesh") {
		t.Errorf("without identity.mesh: err %v, want a refusal naming identity.mesh", err)
	}
	if noMesh.MeshBearer(good) {
		t.Error("MeshBearer claims a credential this node cannot accept")
	}
}
