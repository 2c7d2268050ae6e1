//go:build !lite

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/promcp"
)

func init() {
	register("tools", "list the tools a manifest yields, with their schemas and annotations", runTools)
}

// proMCP advises grouping tools into several servers above these counts.
const (
	adviseMaxTools   = 8
	adviseMaxDoTools = 5
)

// toolList is what tools --json prints. responseSchema repeats outputSchema
// under the name the reference proMCP linter reads.
type toolList struct {
	Device     deviceInfo  `json:"device"`
	PromcpBase string      `json:"promcp_base"`
	Tools      []toolEntry `json:"tools"`
}

type deviceInfo struct {
	ID             string        `json:"id"`
	Type           string        `json:"type"`
	Vendor         string        `json:"vendor,omitempty"`
	Model          string        `json:"model,omitempty"`
	Location       *locationInfo `json:"location,omitempty"`
	PhysMCPVersion string        `json:"physmcp_version"`
}

type locationInfo struct {
	Zone        string           `json:"zone"`
	Area        string           `json:"area,omitempty"`
	Description string           `json:"description,omitempty"`
	Coordinates *coordinatesInfo `json:"coordinates,omitempty"`
}

type coordinatesInfo struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
	Z float64 `json:"z"`
}

func describeDevice(m *manifest.Manifest) deviceInfo {
	d := m.Device
	info := deviceInfo{ID: d.ID, Type: d.Type, Vendor: d.Vendor, Model: d.Model, PhysMCPVersion: m.PhysMCPVersion}
	if l := d.Location; l != nil {
		info.Location = &locationInfo{Zone: l.Zone, Area: l.Area, Description: l.Description}
		if c := l.Coordinates; c != nil {
			info.Location.Coordinates = &coordinatesInfo{X: c.X, Y: c.Y, Z: c.Z}
		}
	}
	return info
}

type toolEntry struct {
	Name           string             `json:"name"`
	Title          string             `json:"title"`
	Description    string             `json:"description"`
	InputSchema    json.RawMessage    `json:"inputSchema"`
	OutputSchema   json.RawMessage    `json:"outputSchema"`
	ResponseSchema json.RawMessage    `json:"responseSchema"`
	Annotations    mcp.ToolAnnotation `json:"annotations"`
}

func runTools(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tools", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: physmcpd tools --manifest FILE [--policy FILE] [--group NAME] [--json]")
		fs.PrintDefaults()
	}
	manifestPath := fs.String("manifest", "", "device manifest (physmcp.manifest.yml), required")
	policyPath := fs.String("policy", "", "policy (physmcp.policy.yml)")
	asJSON := fs.Bool("json", false, "print the tool list as JSON (for the proMCP linter)")
	group := fs.String("group", "", "list only the tools of this manifest group's endpoint")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || *manifestPath == "" {
		fmt.Fprintln(stderr, "physmcpd tools: --manifest is required and takes no other arguments")
		return 2
	}
	m, p, ok := loadDevice(*manifestPath, *policyPath, stderr)
	if !ok {
		return 1
	}
	// Listing never touches hardware: every bus is simulated.
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e, err := openEngine(context.Background(), m, p, true, logger, engine.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "physmcpd tools: %v\n", err)
		return 1
	}
	defer e.Close()
	tools, err := mcpserver.Tools(e)
	if *group != "" {
		tools, err = mcpserver.GroupTools(e, *group)
	}
	if err != nil {
		fmt.Fprintf(stderr, "physmcpd tools: %v\n", err)
		return 1
	}
	adviseGrouping(stderr, tools)

	if !*asJSON {
		printToolTable(stdout, m, tools)
		return 0
	}
	list := toolList{
		Device:     describeDevice(m),
		PromcpBase: promcp.BaseVersion,
		Tools:      make([]toolEntry, len(tools)),
	}
	for i, t := range tools {
		list.Tools[i] = toolEntry{Name: t.Name, Title: t.Title, Description: t.Description,
			InputSchema: t.RawInputSchema, OutputSchema: t.RawOutputSchema, ResponseSchema: t.RawOutputSchema,
			Annotations: t.Annotations}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(list); err != nil {
		fmt.Fprintf(stderr, "physmcpd tools: %v\n", err)
		return 1
	}
	return 0
}

func adviseGrouping(w io.Writer, tools []mcp.Tool) {
	doTools := 0
	for _, t := range tools {
		if strings.HasPrefix(t.Name, "do_") {
			doTools++
		}
	}
	if len(tools) > adviseMaxTools {
		fmt.Fprintf(w, "warning: %d tools; proMCP advises at most %d per server (tool selection degrades): consider splitting the device\n", len(tools), adviseMaxTools)
	}
	if doTools > adviseMaxDoTools {
		fmt.Fprintf(w, "warning: %d do_* tools; proMCP advises at most %d per server\n", doTools, adviseMaxDoTools)
	}
}

func printToolTable(w io.Writer, m *manifest.Manifest, tools []mcp.Tool) {
	fmt.Fprintf(w, "device %s (%s), promcp_base %s, %d tools\n\n", m.Device.ID, m.Device.Type, promcp.BaseVersion, len(tools))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tREAD-ONLY\tDESTRUCTIVE\tIDEMPOTENT\tTITLE")
	for _, t := range tools {
		a := t.Annotations
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, yesNo(a.ReadOnlyHint), yesNo(a.DestructiveHint), yesNo(a.IdempotentHint), t.Title)
	}
	tw.Flush()
}

func yesNo(b *bool) string {
	switch {
	case b == nil:
		return "-"
	case *b:
		return "yes"
	}
	return "no"
}
