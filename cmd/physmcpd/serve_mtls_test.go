//go:build !lite

package main

import (
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/internal/testpki"
)

const mtlsServePolicy = `physmcp_policy_version: "0.1"
identity:
  providers:
    - type: mtls
      ca_cert_path: clients-ca.pem
      clients:
        - {name: hmi-01, role: operator}
`

// serve asks HTTPS clients for a certificate when the policy has an mtls
// provider, and refuses to serve such a policy without HTTPS.
func TestServeMTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "clients CA")
	serverCert, serverKey := ca.Server(t)
	for name, data := range map[string][]byte{"physmcp.policy.yml": []byte(mtlsServePolicy), "clients-ca.pem": ca.PEM, "server.pem": serverCert, "server.key": serverKey} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	policyPath := filepath.Join(dir, "physmcp.policy.yml")
	args := []string{"serve", "--manifest", serveExampleManifest, "--policy", policyPath, "--simulate", "--http", "127.0.0.1:0"}

	var stderr bytes.Buffer
	if code := run(args, io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), "mtls identity provider, which needs HTTPS") {
		t.Errorf("without --tls-cert: exit %d, %s", code, stderr.String())
	}

	url, _, _, _ := serveInBackground(t, append(args[1:], "--tls-cert", filepath.Join(dir, "server.pem"), "--tls-key", filepath.Join(dir, "server.key")))
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("serve listens at %s", url)
	}
	now := time.Now()
	good := ca.Client(t, "hmi-01", nil, now.Add(-time.Hour), now.Add(time.Hour))
	for _, c := range []struct {
		name   string
		cert   []tls.Certificate
		status int
	}{{"no certificate", nil, 401}, {"hmi-01", []tls.Certificate{good}, 200}} {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: c.cert}}}
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, resp.StatusCode, body, c.status)
		}
	}
}
