//go:build !lite

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/physmcp/physmcpd/lint"
)

func init() {
	register("lint", "check any MCP server's tools for proMCP compliance (a tool-list file, --stdio or --url)", runLint)
}

// headerFlags collects repeated --header "Name: value" flags.
type headerFlags map[string]string

func (h headerFlags) String() string { return "" }

func (h headerFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("want \"Name: value\", got %q", v)
	}
	h[strings.TrimSpace(name)] = strings.TrimSpace(value)
	return nil
}

// runLint exits 0 when clean, 1 on findings (errors; warnings too with
// --strict), 2 on a usage or connection error.
func runLint(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lint", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: physmcpd lint [--strict] [--strict-base] [--json] [--rules] (TOOLS.json | --stdio \"CMD ARGS\" | --url URL [--header \"Name: value\"]...)")
		fmt.Fprintln(stderr, "  TOOLS.json: a tool list (physmcpd tools --json, a tools/list result, or the reference linter's array);")
		fmt.Fprintln(stderr, "  --stdio and --url also call every read_* and can_do (never a do_*) and check the answers.")
		fs.PrintDefaults()
	}
	strict := fs.Bool("strict", false, "warnings fail too")
	strictBase := fs.Bool("strict-base", false, "report the extension verb start_* (docs/roadmap.md) as not base proMCP v0.2")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	stdioCmd := fs.String("stdio", "", "lint the server this command starts (MCP over its stdin/stdout)")
	url := fs.String("url", "", "lint the streamable HTTP server at URL")
	headers := headerFlags{}
	fs.Var(headers, "header", "an HTTP header for --url, \"Name: value\" (repeatable)")
	timeout := fs.Duration("timeout", 60*time.Second, "give up on a live server after this long")
	listRules := fs.Bool("rules", false, "list the rule ids and exit (docs/lint.md explains each)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *listRules {
		for _, r := range lint.Rules {
			scope := "static"
			if r.Live {
				scope = "live"
			}
			fmt.Fprintf(stdout, "%-26s %-7s %-6s %s\n", r.ID, r.Severity, scope, r.Summary)
		}
		return 0
	}
	usageError := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "physmcpd lint: "+format+"\n", a...)
		return 2
	}
	sources := 0
	for _, given := range []bool{fs.NArg() > 0, *stdioCmd != "", *url != ""} {
		if given {
			sources++
		}
	}
	if sources != 1 || fs.NArg() > 1 {
		return usageError("give exactly one of a tool-list file, --stdio \"CMD ARGS\" or --url URL")
	}
	if len(headers) > 0 && *url == "" {
		return usageError("--header applies to --url only")
	}

	report := lint.Report{Findings: []lint.Finding{}, Notes: []string{}}
	var (
		tools        []lint.Tool
		liveFindings []lint.Finding
	)
	if fs.NArg() == 1 {
		report.Source = fs.Arg(0)
		data, err := os.ReadFile(fs.Arg(0))
		if err != nil {
			return usageError("%v", err)
		}
		if tools, err = lint.ParseToolList(data); err != nil {
			return usageError("%s: %v", fs.Arg(0), err)
		}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		target := lint.Target{URL: *url, Headers: headers}
		report.Source = *url
		if *stdioCmd != "" {
			cmd, err := lint.SplitCommand(*stdioCmd)
			if err != nil {
				return usageError("--stdio: %v", err)
			}
			target.Command, report.Source = cmd, "stdio: "+*stdioCmd
		}
		s, err := lint.Dial(ctx, target)
		if err != nil {
			return usageError("%s: %v", report.Source, err)
		}
		defer s.Close()
		if tools, err = s.ListTools(ctx); err != nil {
			return usageError("%s: %v", report.Source, err)
		}
		report.Live = true
		var notes []string
		liveFindings, notes = lint.Live(ctx, s, tools)
		if ctx.Err() != nil {
			return usageError("%s: no answer within %s", report.Source, *timeout)
		}
		report.Notes = append(report.Notes, notes...)
	}
	report.Tools = len(tools)
	report.Add(lint.CheckWith(tools, lint.Options{StrictBase: *strictBase})...)
	report.Add(liveFindings...)

	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			fmt.Fprintf(stderr, "physmcpd lint: %v\n", err)
			return 2
		}
	} else {
		printLint(stdout, report, *strict)
	}
	if report.Failed(*strict) {
		return 1
	}
	return 0
}

func printLint(w io.Writer, r lint.Report, strict bool) {
	mode := "static"
	if r.Live {
		mode = "static + live"
	}
	fmt.Fprintf(w, "%s: %d tools (%s checks)\n", r.Source, r.Tools, mode)
	for _, f := range r.Findings {
		fmt.Fprintln(w, f)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note    %s\n", n)
	}
	verdict := "clean"
	if r.Failed(strict) {
		verdict = "FAIL"
	} else if r.Warnings > 0 {
		verdict = "pass with warnings (--strict fails them)"
	}
	fmt.Fprintf(w, "%d error(s), %d warning(s): %s\n", r.Errors, r.Warnings, verdict)
}
