package state

import (
	"fmt"
	"syscall"
)

// dropPages removes n bytes of a shared file mapping from addr on from the
// process's page tables; the file's pages stay in the page cache.
func dropPages(addr, n uintptr) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, addr, n, syscall.MADV_DONTNEED); errno != 0 {
		return fmt.Errorf("madvise %#x+%d: %w", addr, n, errno)
	}
	return nil
}
