package auth

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
)

// MethodMTLS is a caller identified by a client certificate.
const MethodMTLS = "mtls"

// certVerifier is one mtls provider: the CAs it trusts and the certificate
// names it maps to roles.
type certVerifier struct {
	roots   *x509.CertPool
	subject string // policy.SubjectCN, ...
	roles   map[string]manifest.Role
}

func newCertVerifier(pr *policy.Provider, baseDir string) (*certVerifier, error) {
	path := pr.CACertPath
	if !filepath.IsAbs(path) {
		path = filepath.Join(baseDir, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ca_cert_path: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("ca_cert_path %s: no PEM certificate in it", path)
	}
	v := &certVerifier{roots: roots, subject: pr.Subject, roles: map[string]manifest.Role{}}
	if v.subject == "" {
		v.subject = policy.SubjectCN
	}
	for _, c := range pr.Clients {
		v.roles[c.Name] = c.Role
	}
	return v, nil
}

// names are the certificate's names of the provider's subject kind.
func (v *certVerifier) names(cert *x509.Certificate) []string {
	switch v.subject {
	case policy.SubjectDNS:
		return cert.DNSNames
	case policy.SubjectEmail:
		return cert.EmailAddresses
	case policy.SubjectURI:
		var out []string
		for _, u := range cert.URIs {
			out = append(out, u.String())
		}
		return out
	}
	if cert.Subject.CommonName == "" {
		return nil
	}
	return []string{cert.Subject.CommonName}
}

// verify checks chain (the peer's certificates, leaf first, as the TLS
// handshake received them; the handshake proved the key) against the
// provider's CAs for client authentication at now, then maps its name.
func (v *certVerifier) verify(chain []*x509.Certificate, now time.Time) (Principal, error) {
	leaf := chain[0]
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: v.roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return Principal{}, describeCertError(err, leaf, now)
	}
	names := v.names(leaf)
	for _, n := range names {
		if role, ok := v.roles[n]; ok {
			return Principal{Name: "mtls:" + n, Role: role, Method: MethodMTLS, Expires: leaf.NotAfter}, nil
		}
	}
	if len(names) == 0 {
		return Principal{}, &Error{Description: fmt.Sprintf("the client certificate has no %s name to identify it by", v.subject)}
	}
	return Principal{}, &Error{Description: fmt.Sprintf("the client certificate's %s %q is not mapped to a role", v.subject, names[0])}
}

// errUnknownCA is a certificate a provider's CA did not sign: a provider
// whose CA did sign it says better what is wrong with it.
var errUnknownCA = &Error{Description: "the client certificate is not signed by a CA of any mtls provider"}

func describeCertError(err error, leaf *x509.Certificate, now time.Time) error {
	var inv x509.CertificateInvalidError
	switch {
	case errors.As(err, new(x509.UnknownAuthorityError)):
		return errUnknownCA
	case errors.As(err, &inv) && inv.Reason == x509.Expired:
		if now.After(leaf.NotAfter) {
			return &Error{Description: fmt.Sprintf("the client certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))}
		}
		return &Error{Description: "the client certificate (or a CA above it) is expired or not valid yet"}
	case errors.As(err, &inv) && inv.Reason == x509.IncompatibleUsage:
		return &Error{Description: "the client certificate is not for client authentication (extended key usage)"}
	}
	return &Error{Description: fmt.Sprintf("the client certificate does not verify: %v", err)}
}

// AcceptsClientCertificates reports whether the policy has an mtls
// provider: the HTTPS listener then asks clients for a certificate.
func (a *Authenticator) AcceptsClientCertificates() bool { return a != nil && len(a.certs) > 0 }

// ErrNoCertificate is the Error for a request with neither a bearer token
// nor a client certificate.
var ErrNoCertificate = &Error{Description: "this endpoint requires a bearer token (Authorization: Bearer TOKEN) or a client certificate"}

// AuthenticateCertificate identifies a caller by the certificate chain it
// presented in the TLS handshake: the first provider whose CA signed it and
// whose clients name it decides.
func (a *Authenticator) AuthenticateCertificate(chain []*x509.Certificate) (Principal, error) {
	if len(chain) == 0 {
		return Principal{}, ErrNoCertificate
	}
	if len(a.certs) == 0 {
		return Principal{}, &Error{Description: "client certificates are not accepted here (the policy has no mtls provider)"}
	}
	now := a.now()
	var firstErr error
	for _, v := range a.certs {
		p, err := v.verify(chain, now)
		if err == nil {
			return p, nil
		}
		if firstErr == nil || firstErr == errUnknownCA {
			firstErr = err
		}
	}
	return Principal{}, firstErr
}
