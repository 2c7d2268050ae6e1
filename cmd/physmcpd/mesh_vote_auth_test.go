//go:build !lite

package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/mesh"
	"github.com/physmcp/physmcpd/meshroute"
	"github.com/physmcp/physmcpd/policy"
)

// postVote sends a physmcp/quorum_vote naming requester to endpoint with a
// mesh credential node minted for audience: the HTTP status, and the
// JSON-RPC error or the vote.
func postVote(t testing.TB, endpoint string, keys [][]byte, node, audience, requester string) (int, string, meshroute.Vote) {
	t.Helper()
	tok, _, err := auth.MeshCredential(keys, node, audience, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": meshroute.VoteMethod,
		"params": meshroute.VoteRequest{Requester: requester, Device: requester, Tool: "do_pump"}})
	req, _ := http.NewRequest(http.MethodPost, endpoint, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Result meshroute.Vote `json:"result"`
		Error  *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if out.Error != nil {
		return resp.StatusCode, out.Error.Message, out.Result
	}
	return resp.StatusCode, "", out.Result
}

// The vote handler behind the endpoint's access rules, with real mesh
// credentials: node_2 may ask in its own name only (else it could claim to
// be a node this one sees alive), a credential minted for another device
// is refused before the handler, and a principal without a node is refused
// by the handler itself.
func TestQuorumVoteHeldToTheCredentialsNode(t *testing.T) {
	m, diags := manifest.Load("../../examples/mesh/greenhouse/physmcp.manifest.yml")
	if m == nil {
		t.Fatal(diags)
	}
	keys := [][]byte{[]byte("0123456789abcdef0123456789abcdef")}
	p := &policy.Policy{Identity: &policy.Identity{Mesh: &policy.MeshIdentity{Role: manifest.Role("operator")}}}
	a, err := auth.New(p, auth.Options{DeviceID: m.Device.ID, MeshKeys: keys})
	if err != nil {
		t.Fatal(err)
	}
	audited := make(chan meshroute.Refusal, 4) // the server's goroutines send
	router := meshroute.New(nil, meshroute.Config{Audit: func(ev meshroute.Refusal) { audited <- ev }})
	// The handler audits before it answers: nothing waiting is nothing audited.
	nextAudited := func() meshroute.Refusal {
		select {
		case ev := <-audited:
			return ev
		default:
			t.Error("a refusal was not audited")
			return meshroute.Refusal{}
		}
	}
	methods := meshMethods(m, "full", nil, nil, router, nil)
	srv := httptest.NewServer(mcpserver.Protect(mcpserver.WithMethods(http.NotFoundHandler(), methods), mcpserver.Access{Auth: a}))
	defer srv.Close()

	status, msg, _ := postVote(t, srv.URL, keys, "node_2", m.Device.ID, "node_3")
	if want := `requester "node_3" is not the node its mesh credential was minted for ("node_2")`; status != http.StatusOK || !strings.Contains(msg, want) {
		t.Errorf("node_2 asking as node_3: HTTP %d %q, want refused with %q", status, msg, want)
	}
	if ev := nextAudited(); ev.Credential != "node_2" || ev.Named != "node_3" {
		t.Errorf("audited %+v, want node_2 naming node_3", ev)
	}
	// Answered in its own name (this node has not joined, so not confirmed).
	if status, msg, v := postVote(t, srv.URL, keys, "node_2", m.Device.ID, "node_2"); msg != "" || v.Reason != "this node has not joined the mesh yet" {
		t.Errorf("node_2 asking as node_2: HTTP %d %q %+v, want answered", status, msg, v)
	}
	if status, _, _ := postVote(t, srv.URL, keys, "node_2", "another_device", "node_2"); status != http.StatusUnauthorized {
		t.Errorf("a credential minted for another device: HTTP %d, want 401", status)
	}
	anonymous := auth.WithPrincipal(context.Background(), auth.Principal{Name: "mesh:", Method: auth.MethodMesh})
	if _, err := methods[meshroute.VoteMethod](anonymous, json.RawMessage(`{"requester": "node_2", "tool": "do_pump"}`)); err == nil || !strings.Contains(err.Error(), "names no calling node") {
		t.Errorf("a mesh principal naming no node: %v, want refused", err)
	}
	if ev := nextAudited(); ev.Credential != "" || ev.Named != "node_2" || len(audited) != 0 {
		t.Errorf("audited %+v and %d more, want only the principal naming no node", ev, len(audited))
	}
}

// meshPeerAsksOnlyAsItself checks, on the running node d, that a holder of
// the keyring (dir's mesh.key) with a credential for node_2 gets a vote and a
// forwarded can_do answered as node_2 only, never as node_3, and that d logs
// the refusals; forged is a can_do with a hop in _meta.
func meshPeerAsksOnlyAsItself(t *testing.T, dir string, d *meshProc, forged mcp.CallToolRequest) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "mesh.key"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	keys := [][]byte{key}
	for deadline := time.Now().Add(30 * time.Second); peerState(peersOf(t, d.endpoint), "node_2") != mesh.Alive; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s does not see node_2 alive within 30 s", d.id)
		}
	}
	if _, msg, v := postVote(t, d.endpoint, keys, "node_2", d.id, "node_2"); msg != "" || !v.Confirm {
		t.Errorf("a vote asked by node_2 as node_2: %q %+v, want confirmed", msg, v)
	}
	if _, msg, v := postVote(t, d.endpoint, keys, "node_2", d.id, "node_3"); !strings.Contains(msg, `requester "node_3" is not the node its mesh credential was minted for ("node_2")`) || v.Confirm {
		t.Errorf("a vote asked by node_2 as node_3 (alive): %q %+v, want refused", msg, v)
	}
	if status, _, _ := postVote(t, d.endpoint, keys, "node_2", "node_3", "node_2"); status != http.StatusUnauthorized {
		t.Errorf("node_2's credential for node_3 presented to %s: HTTP %d, want 401", d.id, status)
	}
	tok, _, err := auth.MeshCredential(keys, "node_2", d.id, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := transport.NewStreamableHTTP(d.endpoint, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + tok}))
	if err != nil {
		t.Fatal(err)
	}
	c := dialMCP(t, tr)
	hop := forged.Params.Meta.AdditionalFields[meshroute.MetaKey].(map[string]any)
	for from, refused := range map[string]bool{"node_3": true, "node_2": false} {
		fwd := forged
		h := maps.Clone(hop)
		h["query_id"], h["from"], h["visited"] = "as-"+from, from, []string{"node_1", from}
		fwd.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{meshroute.MetaKey: h}}
		if _, res := canDo(t, c, fwd); res.IsError != refused {
			t.Errorf("a forwarded can_do from node_2 as %s: isError %v, want %v: %v", from, res.IsError, refused, res.Content)
		}
	}
	// The node writes its log line as it answers: the second may reach the
	// pipe after the answer reached this client.
	const refusal = "AUDIT mesh: a peer request in another node's name refused"
	for deadline := time.Now().Add(10 * time.Second); strings.Count(d.log.String(), refusal) < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if log := d.log.String(); strings.Count(log, refusal) != 2 {
		t.Errorf("%s did not log both refusals:\n%s", d.id, log)
	}
}
