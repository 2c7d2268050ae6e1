// Package pagemap counts which pages of a range of the process's memory are
// in its page tables, for tests of code that releases pages.
package pagemap

import (
	"os"
)

// Present says how many of the pages from addr for n bytes are mapped in the
// process's page tables (pagemap(5), bit 63), whether or not the page cache
// holds them.
func Present(addr, n uintptr) (int, error) {
	pm, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return 0, err
	}
	defer pm.Close()
	page := uintptr(os.Getpagesize())
	first, last := addr/page, (addr+n+page-1)/page
	entries := make([]byte, (last-first)*8)
	if _, err := pm.ReadAt(entries, int64(first*8)); err != nil {
		return 0, err
	}
	count := 0
	for i := 7; i < len(entries); i += 8 {
		count += int(entries[i] >> 7)
	}
	return count, nil
}
