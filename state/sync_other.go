//go:build !linux

package state

import "os"

func fdatasync(f *os.File) error { return f.Sync() }
