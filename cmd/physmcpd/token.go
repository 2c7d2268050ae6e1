//go:build !lite

package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
)

func init() {
	register("token", "make bearer tokens: a static token for the policy, or an emergency override", runToken)
}

func runToken(args []string, stdout, stderr io.Writer) int {
	usage := func() int {
		fmt.Fprintln(stderr, "usage: physmcpd token new --name NAME --role ROLE")
		fmt.Fprintln(stderr, "       physmcpd token override --manifest FILE --policy FILE --key FILE --name WHO --reason WHY")
		return 2
	}
	if len(args) == 0 {
		return usage()
	}
	switch args[0] {
	case "new":
		return tokenNew(args[1:], stdout, stderr)
	case "override":
		return tokenOverride(args[1:], stdout, stderr, time.Now)
	case "-h", "--help", "help":
		usage()
		return 0
	}
	fmt.Fprintf(stderr, "physmcpd token: unknown subcommand %q\n", args[0])
	return usage()
}

// tokenNew prints a fresh random token and the policy entry that holds only its hash.
func tokenNew(args []string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("token new", flag.ContinueOnError)
	fset.SetOutput(stderr)
	name := fset.String("name", "", "the token's name in the policy and the audit trail, required")
	role := fset.String("role", "", "the role it grants: "+manifest.RoleNames())
	if err := fset.Parse(args); err != nil {
		return 2
	}
	if *name == "" || !manifest.ValidRole(manifest.Role(*role)) {
		fmt.Fprintf(stderr, "physmcpd token new: give --name and --role (one of %s)\n", manifest.RoleNames())
		return 2
	}
	raw := make([]byte, 32)
	rand.Read(raw)
	token := base64.RawURLEncoding.EncodeToString(raw)
	fmt.Fprintf(stdout, "token: %s\n", token)
	fmt.Fprintf(stdout, "policy entry (under identity.providers[].tokens of a static provider):\n")
	fmt.Fprintf(stdout, "  - {name: %s, sha256: %s, role: %s}\n", *name, policy.HashToken(token), *role)
	fmt.Fprintln(stderr, "The token is shown once; give it to the client (Authorization: Bearer TOKEN) and keep only the hash.")
	return 0
}

// tokenOverride mints an emergency override and audits the minting. The key
// file is created on first use; serve verifies with the same file (--override-key).
func tokenOverride(args []string, stdout, stderr io.Writer, now func() time.Time) int {
	fset := flag.NewFlagSet("token override", flag.ContinueOnError)
	fset.SetOutput(stderr)
	manifestPath := fset.String("manifest", "", "device manifest, required (its device.id is the token's audience)")
	policyPath := fset.String("policy", "", "policy with an emergency section, required")
	keyPath := fset.String("key", "", "override key file, required; created (mode 0600) when it does not exist")
	name := fset.String("name", "", "who uses the override, required (audited)")
	reason := fset.String("reason", "", "why, required (audited)")
	if err := fset.Parse(args); err != nil {
		return 2
	}
	if *manifestPath == "" || *policyPath == "" || *keyPath == "" || *name == "" || *reason == "" {
		fmt.Fprintln(stderr, "physmcpd token override: --manifest, --policy, --key, --name and --reason are all required")
		return 2
	}
	m, p, ok := loadDevice(*manifestPath, *policyPath, stderr)
	if !ok {
		return 1
	}
	key, created, err := overrideKey(*keyPath)
	if err != nil {
		fmt.Fprintf(stderr, "physmcpd token override: %v\n", err)
		return 1
	}
	o, err := auth.MintOverride(p, m.Device.ID, key, *name, *reason, now())
	if err != nil {
		fmt.Fprintf(stderr, "physmcpd token override: %v\n", err)
		return 1
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	auth.LogAudit(logger)(auth.AuditEvent{Kind: auth.AuditOverrideMinted, Name: "override:" + *name, Reason: *reason, TokenID: o.ID, Role: o.Role, Expires: o.Expires})
	if created {
		fmt.Fprintf(stderr, "created the override key %s; start serve with --override-key %s so it accepts this token\n", *keyPath, *keyPath)
	}
	fmt.Fprintf(stderr, "override for %s grants role %s until %s\n", *name, o.Role, o.Expires.Format(time.RFC3339))
	fmt.Fprintln(stdout, o.Token)
	return 0
}

func overrideKey(path string) (key []byte, created bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key = auth.NewOverrideKey()
		if err := os.WriteFile(path, append(key, '\n'), 0o600); err != nil {
			return nil, false, err
		}
		return key, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return bytes.TrimSpace(data), false, nil
}
