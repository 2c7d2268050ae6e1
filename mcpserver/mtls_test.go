//go:build !lite

package mcpserver_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/internal/testpki"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/policy"
)

// mtlsPolicy has two mtls providers on one CA, one by common name and one by
// DNS name, and a static token beside them.
func mtlsPolicy() string {
	return fmt.Sprintf(`physmcp_policy_version: "0.1"
identity:
  local_role: admin
  providers:
    - type: static
      tokens:
        - {name: operator, sha256: %s, role: operator}
    - type: mtls
      ca_cert_path: clients-ca.pem
      clients:
        - {name: hmi-01, role: operator}
        - {name: wall-panel, role: none}
    - type: mtls
      ca_cert_path: clients-ca.pem
      subject: dns
      clients:
        - {name: tech.plant.example, role: supervisor}
`, policy.HashToken("operator-token"))
}

// startMTLSDevice serves the test boiler over HTTPS with the listener
// configuration serve uses.
func startMTLSDevice(t *testing.T, ca *testpki.CA) (*accessDevice, *httptest.Server) {
	t.Helper()
	d, h := newAccessDevice(t, mtlsPolicy(), map[string]string{"clients-ca.pem": string(ca.PEM)}, nil, mcpserver.Access{})
	ts := httptest.NewUnstartedServer(h)
	ts.TLS = mcpserver.TLSConfig(d.acc)
	ts.StartTLS()
	t.Cleanup(ts.Close)
	d.url = ts.URL
	return d, ts
}

// httpsClient trusts the test server and presents cert (none if nil).
func httpsClient(ts *httptest.Server, cert *tls.Certificate) *http.Client {
	roots := x509.NewCertPool()
	roots.AddCert(ts.Certificate())
	cfg := &tls.Config{RootCAs: roots}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
}

// A client certificate the policy maps to a role gets that role over the
// real HTTPS server with the mcp-go client: the operator's certificate sees
// and calls do_*, a certificate mapped to role none is refused do_* with
// nothing written, and a DNS name maps as well as a common name.
func TestMTLSRoles(t *testing.T) {
	ca := testpki.NewCA(t, "plant clients CA")
	d, ts := startMTLSDevice(t, ca)
	now := time.Now()
	valid := func(cn string, dns ...string) *tls.Certificate {
		c := ca.Client(t, cn, dns, now.Add(-time.Hour), now.Add(time.Hour))
		return &c
	}

	panel := d.connect(t, nil, httpsClient(ts, valid("wall-panel")))
	if names := toolNames(t, panel); slices.Contains(names, "do_boiler_setpoint") || !slices.Contains(names, "read_boiler_setpoint") {
		t.Errorf("role none sees %v", names)
	}
	if _, err := callDo(t, panel, "do_boiler_setpoint", map[string]any{"value": 50}); err == nil {
		t.Error("role none's do_ call succeeded")
	}
	resp, body := postWith(t, httpsClient(ts, valid("wall-panel")), d.url+mcpserver.EndpointPath,
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"do_boiler_setpoint","arguments":{"value":50}}}`, nil)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "permission_insufficient") {
		t.Errorf("role none tools/call: %d %s", resp.StatusCode, body)
	}
	if n := d.bus.writes.Load(); n != 0 {
		t.Fatalf("%d writes after role none's calls", n)
	}

	for i, cert := range []*tls.Certificate{valid("hmi-01"), valid("laptop-7", "tech.plant.example")} {
		c := d.connect(t, nil, httpsClient(ts, cert))
		if names := toolNames(t, c); !slices.Contains(names, "do_boiler_setpoint") {
			t.Errorf("certificate %d sees %v", i, names)
		}
		res, err := callDo(t, c, "do_boiler_setpoint", map[string]any{"value": 50 + i})
		if err != nil || res.IsError {
			t.Fatalf("certificate %d's do_: %v %+v", i, err, res)
		}
		read := mcp.CallToolRequest{}
		read.Params.Name = "read_boiler_setpoint"
		if res, err := c.CallTool(t.Context(), read); err != nil || res.IsError {
			t.Fatalf("certificate %d's read: %v %+v", i, err, res)
		}
	}
	if n := d.bus.writes.Load(); n != 2 {
		t.Errorf("%d writes after the two allowed calls, want 2", n)
	}
}

// A certificate that does not identify a known client is refused with 401
// before its body is read (the connection closes after the answer), and the
// mcp-go client cannot initialize with it.
func TestMTLSRefusals(t *testing.T) {
	ca := testpki.NewCA(t, "plant clients CA")
	other := testpki.NewCA(t, "someone else's CA")
	_, ts := startMTLSDevice(t, ca)
	now := time.Now()
	cert := func(ca *testpki.CA, cn string, from, to time.Time) *tls.Certificate {
		c := ca.Client(t, cn, nil, from, to)
		return &c
	}
	cases := []struct {
		name string
		cert *tls.Certificate
		want string
	}{
		{"no certificate", nil, "or a client certificate"},
		{"unknown subject", cert(ca, "intruder", now.Add(-time.Hour), now.Add(time.Hour)), `cn \"intruder\" is not mapped to a role`},
		{"expired", cert(ca, "hmi-01", now.Add(-48*time.Hour), now.Add(-time.Hour)), "the client certificate expired at"},
		{"not valid yet", cert(ca, "hmi-01", now.Add(time.Hour), now.Add(48*time.Hour)), "expired or not valid yet"},
		{"another CA", cert(other, "hmi-01", now.Add(-time.Hour), now.Add(time.Hour)), "not signed by a CA of any mtls provider"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hc := httpsClient(ts, c.cert)
			resp, body := postWith(t, hc, ts.URL+mcpserver.EndpointPath, initializeBody, nil)
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, c.want) {
				t.Fatalf("status %d %s, want 401 with %q", resp.StatusCode, body, c.want)
			}
			if !resp.Close {
				t.Error("the refused request's connection stays open: its body would be read")
			}
			tr, err := transport.NewStreamableHTTP(ts.URL+mcpserver.EndpointPath, transport.WithHTTPBasicClient(hc))
			if err != nil {
				t.Fatal(err)
			}
			mc := client.NewClient(tr)
			defer mc.Close()
			if err := mc.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			if _, err := mc.Initialize(t.Context(), mcp.InitializeRequest{}); err == nil {
				t.Error("the mcp-go client initialized")
			}
		})
	}
	// A bearer token still works on the same listener, and decides alone:
	// a bad token is refused even beside a good certificate.
	good := cert(ca, "hmi-01", now.Add(-time.Hour), now.Add(time.Hour))
	if resp, body := postWith(t, httpsClient(ts, nil), ts.URL+mcpserver.EndpointPath, initializeBody, map[string]string{"Authorization": "Bearer operator-token"}); resp.StatusCode != 200 {
		t.Errorf("static token over HTTPS: %d %s", resp.StatusCode, body)
	}
	if resp, body := postWith(t, httpsClient(ts, good), ts.URL+mcpserver.EndpointPath, initializeBody, map[string]string{"Authorization": "Bearer nope"}); resp.StatusCode != 401 {
		t.Errorf("bad token with a good certificate: %d %s", resp.StatusCode, body)
	}
}
