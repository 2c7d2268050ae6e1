//go:build !linux

package exepages

// Release does nothing where the kernel's smaps(5) is not there to say which
// pages are clean.
func Release() (int64, error) { return 0, nil }
