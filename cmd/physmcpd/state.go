//go:build !lite

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/physmcp/physmcpd/state"
)

func init() {
	register("state", "state check | reset: verify the state store, or replace one serve refuses", runState)
}

// runState is `physmcpd state check|reset --state-dir D`: exit 0 when the
// store is sound (check) or was replaced (reset), 1 when it is broken (check)
// or could not be replaced (reset), 2 for usage errors.
func runState(args []string, stdout, stderr io.Writer) int {
	usage := "usage: physmcpd state check|reset [--state-dir DIR]"
	if len(args) == 0 || (args[0] != "check" && args[0] != "reset") {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("state "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		fs.PrintDefaults()
	}
	dir := fs.String("state-dir", defaultStateDir, "the state directory serve uses")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "physmcpd state %s: unexpected argument %q\n", args[0], fs.Arg(0))
		return 2
	}
	if args[0] == "check" {
		return stateCheck(*dir, stdout, stderr)
	}
	return stateReset(*dir, time.Now(), stdout, stderr)
}

func stateCheck(dir string, stdout, stderr io.Writer) int {
	rep, err := state.Check(dir)
	var broken *state.BrokenError
	switch {
	case errors.Is(err, state.ErrNoStore):
		fmt.Fprintf(stdout, "no state store in %s yet: serve creates one\n", dir)
		return 0
	case errors.As(err, &broken):
		fmt.Fprintf(stderr, "broken: %s\nserve refuses this store. To start a new one, keeping every record that can still be read: "+
			"physmcpd state reset --state-dir %s (read docs/security.md, \"State store\", first)\n", broken.Summary(), dir)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "physmcpd state check: %v\n", err)
		return 1
	}
	id := rep.StoreID
	if id == "" {
		id = "no id yet"
	}
	fmt.Fprintf(stdout, "ok: %s (store %s): %d idempotency records, %d write histories, %d bytes; every page read and checked in %s\n",
		rep.File, id, rep.Records, rep.Histories, rep.Bytes, rep.Took.Round(10*time.Microsecond))
	for _, n := range rep.Notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	return 0
}

func stateReset(dir string, now time.Time, stdout, stderr io.Writer) int {
	rep, err := state.Reset(dir, now)
	switch {
	case errors.Is(err, state.ErrIntact):
		fmt.Fprintf(stderr, "physmcpd state reset: %s passes every check; nothing to reset (physmcpd state check --state-dir %s)\n",
			filepath.Join(dir, state.FileName), dir)
		return 1
	case errors.Is(err, state.ErrNoStore):
		fmt.Fprintf(stderr, "physmcpd state reset: no state store in %s; nothing to reset (serve creates one)\n", dir)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "physmcpd state reset: %v\n", err)
		return 1
	}
	if rep.MovedTo != "" {
		fmt.Fprintf(stdout, "moved the old store to %s\n", rep.MovedTo)
	}
	fmt.Fprintf(stdout, "new store %s in %s: %d idempotency records and %d write histories copied from the old one\n",
		rep.StoreID, dir, rep.Records, rep.Histories)
	if rep.Lost == nil {
		fmt.Fprintln(stdout, "every record of the old store could be read: nothing was forgotten")
		return 0
	}
	fmt.Fprintf(stderr, "WARNING: records of the last 24 h that could not be read are forgotten (%v).\n"+
		"- A do_* call repeated with a forgotten idempotency key acts again instead of returning its first outcome:\n"+
		"  make sure agents and clients do not retry calls made before now.\n"+
		"- Cooldowns and rate limits restart as if those writes had not happened: the next do_* call may come sooner\n"+
		"  than the manifest allows after the last real write.\n"+
		"- Writes whose outcome was in doubt are no longer settled at start-up: check the actuators by hand before serving.\n",
		rep.Lost)
	return 0
}
