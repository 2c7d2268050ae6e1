//go:build !lite

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/mcpserver"
)

// deviceProfile reads physmcp://<id>/device and returns its profile.
func deviceProfile(t *testing.T, c *client.Client, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := mcp.ReadResourceRequest{}
	req.Params.URI = mcpserver.DeviceURI(id)
	res, err := c.ReadResource(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", req.Params.URI, err)
	}
	text, ok := res.Contents[0].(mcp.TextResourceContents)
	if !ok {
		t.Fatalf("%s: %T", req.Params.URI, res.Contents[0])
	}
	var sum mcpserver.DeviceSummary
	if err := json.Unmarshal([]byte(text.Text), &sum); err != nil {
		t.Fatal(err)
	}
	return sum.Profile
}

// The device resource reports the profile serve serves, whether the
// manifest, --profile or the default chose it.
func TestDeviceResourceNamesTheServedProfile(t *testing.T) {
	t.Run("full", func(t *testing.T) {
		base := startServe(t, serveExampleManifest, serveExamplePolicy)
		if got := deviceProfile(t, httpClient(t, base, exampleOperatorToken), "greenhouse_controller_01"); got != "full" {
			t.Errorf("profile %q, want full", got)
		}
	})
	t.Run("lite", func(t *testing.T) {
		keepRuntime(t)
		clientIn, serverOut := io.Pipe()
		serverIn, clientOut := io.Pipe()
		t.Cleanup(func() { clientOut.Close() })
		serveInProcess(t, []string{"--manifest", serveExampleManifest, "--policy", serveExamplePolicy, "--simulate", "--stdio", "--profile", "lite"}, serverIn, serverOut)
		c := dialMCP(t, transport.NewIO(clientIn, clientOut, io.NopCloser(strings.NewReader(""))))
		if got := deviceProfile(t, c, "greenhouse_controller_01"); got != "lite" {
			t.Errorf("profile %q, want lite", got)
		}
	})
	t.Run("proxy", func(t *testing.T) {
		dir := t.TempDir()
		src := startServe(t, writeFile(t, dir, "pump.yml", pumpSource), writeFile(t, dir, "pump.policy.yml", operatorPolicy))
		token := writeFile(t, dir, "token", operatorToken+"\n")
		proxy := startServe(t, writeFile(t, dir, "proxy.yml", fmt.Sprintf(pumpProxy, src+mcpserver.EndpointPath, token)),
			writeFile(t, dir, "proxy.policy.yml", operatorPolicy))
		if got := deviceProfile(t, httpClient(t, proxy, operatorToken), "plant_proxy_01"); got != "proxy" {
			t.Errorf("profile %q, want proxy", got)
		}
	})
}
