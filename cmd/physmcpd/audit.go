//go:build !lite

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/physmcp/physmcpd/audit"
)

func init() {
	register("audit", "audit verify: check the audit trail's hash chain", runAudit)
}

// auditKeyFile is the key of the trail's HMAC chain inside a state directory.
const auditKeyFile = "audit.key"

// auditKeyPath is the key file serve and audit verify use: the flag's, else
// the state directory's.
func auditKeyPath(flagValue, stateDir string) string {
	if flagValue != "" {
		return flagValue
	}
	return filepath.Join(stateDir, auditKeyFile)
}

// openTrail opens the audit trail in stateDir, keyed (an unkeyed trail from
// an older physmcpd becomes keyed from its next line). The key is created on
// first use: a chain anyone can recompute proves nothing against someone who
// edits the files, and a key costs a 65-byte file.
func openTrail(cfg serveConfig, stateDir string, retentionDays int, logger *slog.Logger) (*audit.Log, error) {
	path := auditKeyPath(cfg.auditKey, stateDir)
	key, created, err := audit.LoadOrCreateKey(path)
	if err != nil {
		return nil, err
	}
	if created {
		logger.Info("audit key created; keep a copy off this machine to check the trail with `physmcpd audit verify --key`", "file", path, "key_id", key.ID())
	}
	trail, err := audit.Open(auditDir(stateDir), retentionDays, nil, audit.WithKey(key))
	var wrong *audit.KeyError
	if errors.As(err, &wrong) {
		return nil, fmt.Errorf("%w (key file %s); give the trail's key with --audit-key, or move %s aside to start a new trail", err, path, auditDir(stateDir))
	}
	return trail, err
}

// runAudit is `physmcpd audit verify --state-dir D [--key FILE]`: exit 0
// when the chain holds, 1 with the first broken line as FILE:LINE, 2 for
// usage errors and a keyed trail that cannot be checked without its key.
func runAudit(args []string, stdout, stderr io.Writer) int {
	usage := "usage: physmcpd audit verify [--state-dir DIR] [--key FILE]"
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
	keyFile := fs.String("key", "", "the trail's key (default: "+auditKeyFile+" in the state directory, when there is one)")
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
	var opts []audit.Option
	key, err := audit.LoadKey(auditKeyPath(*keyFile, *dir))
	switch {
	case err == nil:
		opts = append(opts, audit.WithKey(key))
	case *keyFile != "" || !errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(stderr, "physmcpd audit verify: %v\n", err)
		return 2
	}
	trail := auditDir(*dir)
	rep, err := audit.Verify(trail, opts...)
	var broken *audit.BreakError
	var keyErr *audit.KeyError
	switch {
	case errors.As(err, &broken):
		fmt.Fprintf(stderr, "%s:%d: %s\n", filepath.Join(trail, broken.File), broken.Line, broken.Reason)
		return 1
	case errors.As(err, &keyErr):
		fmt.Fprintf(stderr, "physmcpd audit verify: %v: give the trail's key with --key FILE\n", err)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "physmcpd audit verify: %v\n", err)
		return 1
	}
	keyed := "not keyed: a plain SHA-256 chain, which whoever edits the files can recompute"
	if key != nil {
		keyed = "keyed with key id " + key.ID()
	}
	fmt.Fprintf(stdout, "ok: %d lines in %d files, chain intact (%s)\n", rep.Lines, rep.Files, keyed)
	return 0
}
