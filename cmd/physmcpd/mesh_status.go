//go:build !lite

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/physmcp/physmcpd/mesh"
)

func init() {
	register("mesh", "the mesh as a node sees it: mesh status --url URL [--token T]", runMesh)
}

func runMesh(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "status" {
		fmt.Fprintln(stderr, "usage: physmcpd mesh status --url URL [--token TOKEN] [--json]")
		return 2
	}
	fs := flag.NewFlagSet("mesh status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "", "the node's MCP endpoint, e.g. http://127.0.0.1:8765/mcp")
	token := fs.String("token", "", "bearer token for the endpoint (when its policy asks for one)")
	asJSON := fs.Bool("json", false, "print the answers of physmcp/mesh_status and physmcp/list_peers as JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for each answer")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *url == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "physmcpd mesh status: --url is required (and nothing else)")
		return 2
	}
	c := rpcClient{url: *url, token: *token, http: &http.Client{Timeout: *timeout}}
	var status json.RawMessage
	var peers listPeers
	if err := c.call("physmcp/mesh_status", &status); err != nil {
		fmt.Fprintf(stderr, "physmcpd mesh status: %v\n", err)
		return 1
	}
	if err := c.call("physmcp/list_peers", &peers); err != nil {
		fmt.Fprintf(stderr, "physmcpd mesh status: %v\n", err)
		return 1
	}
	if *asJSON {
		out, _ := json.MarshalIndent(map[string]any{"mesh_status": status, "list_peers": peers}, "", "  ")
		fmt.Fprintln(stdout, string(out))
		return 0
	}
	var st mesh.Status
	if err := json.Unmarshal(status, &st); err != nil {
		fmt.Fprintf(stderr, "physmcpd mesh status: physmcp/mesh_status: %v\n", err)
		return 1
	}
	printMeshStatus(stdout, st, peers, time.Now())
	return 0
}

func printMeshStatus(w io.Writer, st mesh.Status, peers listPeers, now time.Time) {
	if !st.Enabled {
		fmt.Fprintln(w, "mesh: off (network.mesh.enabled is false on this node)")
		return
	}
	s := st.Self
	fmt.Fprintf(w, "node %s (zone %s, %s) gossip %s\n", s.NodeID, orDash(s.Zone), s.Profile, s.Addr)
	fmt.Fprintf(w, "mesh: %d nodes (alive %d, suspected %d, dead %d, left %d); partition %s",
		st.SizeEstimate, st.Alive+1, st.Suspected, st.Dead, st.Left, st.PartitionState)
	if st.Partition.State != mesh.PartitionNone {
		fmt.Fprintf(w, " (reaching %d of %d peers", st.Partition.Reachable, st.Partition.Before)
		if st.Partition.Minority() {
			fmt.Fprint(w, ", minority side")
		}
		fmt.Fprint(w, ")")
	}
	fmt.Fprintf(w, "\nheartbeat %d ms: suspected within %d ms (at the latest %d ms), dead %d ms later; mdns %s; gossip %s\n",
		st.Timing.HeartbeatMs, st.Timing.SuspectWithinMs, st.Timing.SuspectAtLatestMs, st.Timing.DeadAfterMs, st.MDNS,
		map[bool]string{true: "encrypted", false: "NOT encrypted"}[st.Encrypted])
	if st.Health == 0 {
		fmt.Fprint(w, "health score 0: failure detection at full speed\n\n")
	} else {
		ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
		slowed := mesh.Timing{Interval: ms(st.Timing.HeartbeatMs), SuspectWithin: ms(st.Timing.SuspectWithinMs),
			SuspectAtLatest: ms(st.Timing.SuspectAtLatestMs)}.Slowed(st.Health)
		fmt.Fprintf(w, "health score %d: failure detection slowed %d×, a silent peer is suspected within %d ms (at the latest %d ms)\n\n",
			st.Health, st.Slowdown, slowed.SuspectWithin.Milliseconds(), slowed.SuspectAtLatest.Milliseconds())
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tZONE\tSTATE\tSINCE\tLAST SEEN\tENDPOINT")
	for _, p := range peers.Peers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%s ago\t%s\n", p.NodeID, orDash(p.Zone), p.State,
			ago(now, p.Since), ago(now, p.LastSeen), orDash(p.Endpoint))
	}
	tw.Flush()
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(100 * time.Millisecond).String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// rpcClient calls PhysMCP's extension methods, which need no MCP session.
type rpcClient struct {
	url, token string
	http       *http.Client
}

func (c rpcClient) call(method string, result any) error {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method})
	req, err := http.NewRequest(http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("%s: %v", method, err)
	}
	if resp.StatusCode == http.StatusUnauthorized {
		return fmt.Errorf("%s: 401: the endpoint wants a token (--token)", method)
	}
	var rpc struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &rpc); err != nil {
		return fmt.Errorf("%s: HTTP %d, not a JSON-RPC answer: %.200s", method, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if rpc.Error != nil {
		if rpc.Error.Code == -32601 {
			return fmt.Errorf("%s: the server does not know it (not physmcpd, or a physmcpd without the mesh)", method)
		}
		return fmt.Errorf("%s: %d %s", method, rpc.Error.Code, rpc.Error.Message)
	}
	return json.Unmarshal(rpc.Result, result)
}
