package auth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
)

// MinSecretBytes is the shortest HMAC secret accepted: a shorter one can be
// guessed offline from any token signed with it.
const MinSecretBytes = 32

type jwtVerifier struct {
	issuer, audience, roleClaim string
	key                         any // []byte for HMAC, else a public key
	methods                     []string
}

func newJWTVerifier(pr *policy.Provider, baseDir string) (*jwtVerifier, error) {
	if pr.KeyFile == "" {
		return nil, errors.New("key_file is required to verify signatures (an HMAC secret or a PEM public key)")
	}
	path := pr.KeyFile
	if !filepath.IsAbs(path) {
		path = filepath.Join(baseDir, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("key_file: %w", err)
	}
	key, methods, err := parseVerificationKey(data)
	if err != nil {
		return nil, fmt.Errorf("key_file %s: %w", path, err)
	}
	claim := pr.RoleClaim
	if claim == "" {
		claim = "role"
	}
	return &jwtVerifier{issuer: pr.Issuer, audience: pr.Audience, roleClaim: claim, key: key, methods: methods}, nil
}

// parseVerificationKey reads a PEM public key (RSA, ECDSA, Ed25519, or a
// certificate holding one) or, when the file is not PEM, an HMAC secret. The
// algorithms a token may use follow from the key, so a token cannot choose
// HMAC over a public key (algorithm confusion).
func parseVerificationKey(data []byte) (any, []string, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		secret := bytes.TrimRight(data, "\r\n")
		if len(secret) < MinSecretBytes {
			return nil, nil, fmt.Errorf("not a PEM public key, and too short for an HMAC secret (%d bytes, need at least %d)", len(secret), MinSecretBytes)
		}
		return secret, []string{"HS256", "HS384", "HS512"}, nil
	}
	var pub any
	switch block.Type {
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, nil, err
		}
		pub = k
	case "RSA PUBLIC KEY":
		k, err := x509.ParsePKCS1PublicKey(block.Bytes)
		if err != nil {
			return nil, nil, err
		}
		pub = k
	case "CERTIFICATE":
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, nil, err
		}
		pub = c.PublicKey
	default:
		return nil, nil, fmt.Errorf("PEM block %q is not a public key; give the issuer's public key (the private key stays with the issuer)", block.Type)
	}
	switch pub.(type) {
	case *rsa.PublicKey:
		return pub, []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}, nil
	case *ecdsa.PublicKey:
		return pub, []string{"ES256", "ES384", "ES512"}, nil
	case ed25519.PublicKey:
		return pub, []string{"EdDSA"}, nil
	}
	return nil, nil, fmt.Errorf("unsupported public key type %T", pub)
}

func (v *jwtVerifier) verify(token string, now func() time.Time) (Principal, error) {
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(token, claims, keyWithoutCrit(v.key),
		jwt.WithValidMethods(v.methods), jwt.WithIssuer(v.issuer), jwt.WithAudience(v.audience),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithTimeFunc(now), jwt.WithLeeway(Leeway))
	if err != nil {
		return Principal{}, describeJWTError(err)
	}
	raw, ok := claims[v.roleClaim]
	if !ok {
		return Principal{}, invalid("the token has no %q claim naming a role", v.roleClaim)
	}
	role, _ := raw.(string)
	if !manifest.ValidRole(manifest.Role(role)) {
		return Principal{}, invalid("the token's %q claim %v is not a role (%s)", v.roleClaim, raw, manifest.RoleNames())
	}
	sub, _ := claims.GetSubject()
	exp, _ := claims.GetExpirationTime()
	p := Principal{Name: "jwt:" + sub, Role: manifest.Role(role), Method: MethodJWT}
	if exp != nil {
		p.Expires = exp.Time
	}
	return p, nil
}

// keyWithoutCrit returns a key function that refuses any token whose header
// has "crit". RFC 7515 §4.1.11: a recipient must reject a JWS whose crit lists
// an extension it does not understand, and physmcpd understands none; a crit
// that is not a non-empty list of names is malformed and refused as well.
func keyWithoutCrit(key any) jwt.Keyfunc {
	return func(t *jwt.Token) (any, error) {
		crit, ok := t.Header["crit"]
		if !ok {
			return key, nil
		}
		list, _ := crit.([]any)
		names := make([]string, 0, len(list))
		for _, n := range list {
			if s, isString := n.(string); isString && s != "" {
				names = append(names, s)
			}
		}
		if len(list) == 0 || len(names) != len(list) {
			return nil, invalid("the token's \"crit\" header is malformed (RFC 7515 §4.1.11 requires a non-empty list of header names): %v", crit)
		}
		return nil, invalid("the token requires header extensions this server does not understand (crit: %s)", strings.Join(names, ", "))
	}
}
