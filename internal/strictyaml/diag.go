// Package strictyaml decodes hand-written YAML into Go structs without ever
// guessing: unknown keys, wrong types and missing required fields are all
// reported at once, each with the file, line and column it came from.
package strictyaml

import (
	"fmt"
	"sort"
	"strings"
)

// Pos is a place in a source file. Line and Col are 1-based; zero means unknown.
type Pos struct {
	File string
	Line int
	Col  int
}

func (p Pos) String() string {
	if p.Line == 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// Severity tells an error (the file is rejected) from a warning (legal but suspicious).
type Severity int

const (
	Error Severity = iota
	Warning
)

// Diag is one finding about a configuration file.
type Diag struct {
	Pos      Pos
	Severity Severity
	Msg      string
}

func (d Diag) String() string {
	if d.Severity == Warning {
		return fmt.Sprintf("%s: warning: %s", d.Pos, d.Msg)
	}
	return fmt.Sprintf("%s: %s", d.Pos, d.Msg)
}

// Diags collects findings; its zero value is ready to use.
type Diags []Diag

// Errorf records an error at p.
func (ds *Diags) Errorf(p Pos, format string, args ...any) {
	*ds = append(*ds, Diag{Pos: p, Severity: Error, Msg: fmt.Sprintf(format, args...)})
}

// Warnf records a warning at p.
func (ds *Diags) Warnf(p Pos, format string, args ...any) {
	*ds = append(*ds, Diag{Pos: p, Severity: Warning, Msg: fmt.Sprintf(format, args...)})
}

// HasErrors reports whether any finding is an error.
func (ds Diags) HasErrors() bool {
	for _, d := range ds {
		if d.Severity == Error {
			return true
		}
	}
	return false
}

// Errors returns only the errors.
func (ds Diags) Errors() Diags { return ds.filter(Error) }

// Warnings returns only the warnings.
func (ds Diags) Warnings() Diags { return ds.filter(Warning) }

func (ds Diags) filter(s Severity) Diags {
	var out Diags
	for _, d := range ds {
		if d.Severity == s {
			out = append(out, d)
		}
	}
	return out
}

// Sort orders findings by file, line and column so output is stable.
func (ds Diags) Sort() {
	sort.SliceStable(ds, func(i, j int) bool {
		a, b := ds[i].Pos, ds[j].Pos
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
}

// String renders one finding per line.
func (ds Diags) String() string {
	var b strings.Builder
	for _, d := range ds {
		b.WriteString(d.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Err returns the errors as an error value, or nil when there are none.
func (ds Diags) Err() error {
	errs := ds.Errors()
	if len(errs) == 0 {
		return nil
	}
	errs.Sort()
	return &DiagError{Diags: errs}
}

// DiagError carries every error found in a file.
type DiagError struct{ Diags Diags }

func (e *DiagError) Error() string { return strings.TrimRight(e.Diags.String(), "\n") }
