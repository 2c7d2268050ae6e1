//go:build !linux

package state

// dropPages does nothing where MADV_DONTNEED's effect on a shared file
// mapping is not Linux's.
func dropPages(addr, n uintptr) error { return nil }
