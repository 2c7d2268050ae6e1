package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/physmcp/physmcpd/manifest"
)

// MeshIssuer is the iss of the credentials mesh peers call each other with.
const MeshIssuer = "physmcp-mesh"

// MethodMesh is a principal authenticated by a mesh credential.
const MethodMesh = "mesh"

// meshCredentialTTL bounds a stolen credential's use; peers mint a fresh
// one well before it ends.
const meshCredentialTTL = 2 * time.Minute

// meshSigningKey derives the credential key from a gossip key, so the
// gossip key itself never signs anything else.
func meshSigningKey(gossipKey []byte) []byte {
	m := hmac.New(sha256.New, gossipKey)
	m.Write([]byte("physmcp mesh credential v1"))
	return m.Sum(nil)
}

// MeshCredential is the bearer token node presents to the peer whose device
// id is audience: HS256 under the first key of the mesh keyring, sub the
// calling node. Only a holder of the keyring can mint one, so a peer that
// verifies it knows the caller is a member of the mesh; the peer also
// holds the caller to the node the credential names.
func MeshCredential(keys [][]byte, node, audience string, now time.Time) (token string, expires time.Time, err error) {
	switch {
	case len(keys) == 0:
		return "", time.Time{}, errors.New("mesh credential: no keyring (network.mesh.key_file)")
	case node == "" || audience == "":
		return "", time.Time{}, errors.New("mesh credential: the calling node and the called device must be named")
	}
	expires = now.Add(meshCredentialTTL)
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Issuer: MeshIssuer, Subject: node, Audience: jwt.ClaimStrings{audience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(expires),
	})
	token, err = t.SignedString(meshSigningKey(keys[0]))
	return token, expires, err
}

// meshVerifier accepts the credentials of mesh peers: signed with any key
// of this node's keyring (a key being rotated in or out included), for
// this device, unexpired, naming the calling node. They get the policy's
// identity.mesh.role.
type meshVerifier struct {
	keys     [][]byte
	deviceID string
	role     manifest.Role
}

func (v *meshVerifier) verify(token string, now func() time.Time) (Principal, error) {
	if v == nil {
		return Principal{}, invalid("mesh credentials are not accepted here (the manifest has no mesh keyring, or the policy no identity.mesh)")
	}
	for _, k := range v.keys {
		key := meshSigningKey(k)
		claims := jwt.RegisteredClaims{}
		_, err := jwt.ParseWithClaims(token, &claims, keyWithoutCrit(key),
			jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer(MeshIssuer), jwt.WithAudience(v.deviceID),
			jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithTimeFunc(now), jwt.WithLeeway(Leeway))
		switch {
		case errors.Is(err, jwt.ErrTokenSignatureInvalid):
			continue // another key of the ring may have signed it
		case err != nil:
			return Principal{}, describeJWTError(err)
		case claims.Subject == "":
			return Principal{}, invalid("the mesh credential names no calling node (sub)")
		}
		return Principal{Name: "mesh:" + claims.Subject, Role: v.role, Method: MethodMesh, Expires: claims.ExpiresAt.Time, Node: claims.Subject}, nil
	}
	return Principal{}, invalid("the mesh credential is not signed with a key of this node's keyring")
}

// MeshBearer reports whether an Authorization header carries a mesh
// credential, which is checked even where the endpoint requires no
// authentication: a forwarded query must prove where it comes from.
func (a *Authenticator) MeshBearer(authorization string) bool {
	if a == nil || a.mesh == nil {
		return false
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(strings.TrimSpace(token), claims); err != nil {
		return false
	}
	iss, _ := claims["iss"].(string)
	return iss == MeshIssuer
}
