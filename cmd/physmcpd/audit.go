package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/physmcp/physmcpd/audit"
)

func init() {
	register("audit", "audit verify: check the audit trail's hash chain", runAudit)
}

// runAudit is `physmcpd audit verify --state-dir D`: exit 0 when the chain
// holds, 1 with the first broken line as FILE:LINE, 2 for usage errors.
func runAudit(args []string, stdout, stderr io.Writer) int {
	usage := "usage: physmcpd audit verify [--state-dir DIR]"
	if len(args) == 0 || args[0] != "verify" {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		fs.PrintDefaults()
	}
	dir := fs.String("state-dir", defaultStateDir, "the state directory serve used (the trail is in its audit/ folder)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "physmcpd audit verify: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	trail := auditDir(*dir)
	rep, err := audit.Verify(trail)
	var broken *audit.BreakError
	switch {
	case errors.As(err, &broken):
		fmt.Fprintf(stderr, "%s:%d: %s\n", filepath.Join(trail, broken.File), broken.Line, broken.Reason)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "physmcpd audit verify: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "ok: %d lines in %d files, chain intact\n", rep.Lines, rep.Files)
	return 0
}
