package exepages

import (
	"bytes"
	"math/bits"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"github.com/physmcp/physmcpd/internal/pagemap"
)

func identity(t *testing.T, path string) (dev, ino uint64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return uint64(st.Dev), st.Ino
}

func smaps(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Release finds the executable's code among the process's mappings, and
// the read-only data beside it.
func TestReleaseFindsTheExecutable(t *testing.T) {
	dev, ino := identity(t, "/proc/self/exe")
	ms := cleanMappings(smaps(t), dev, ino)
	code := reflect.ValueOf(Release).Pointer()
	found := false
	for _, m := range ms {
		found = found || m.start <= code && code < m.end
	}
	if !found || len(ms) < 2 {
		t.Fatalf("the executable's clean mappings are %+v; want its code (%#x) and its read-only data among them", ms, code)
	}
	released, err := Release()
	if err != nil || released == 0 {
		t.Fatalf("Release() = %d, %v; want the start-up's pages released", released, err)
	}
}

// A private mapping of the file with a page the process wrote is kept (the
// write would be lost); a clean one leaves the page table, and reads the
// file's bytes again when touched.
func TestReleaseDropsCleanPagesAndKeepsWrittenOnes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	const size = 64 << 10
	if err := os.WriteFile(path, bytes.Repeat([]byte{'a'}, size), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	written, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(written)
	written[0] = 'b' // copied on write: the mapping now holds an anonymous page
	if err := syscall.Mprotect(written, syscall.PROT_READ); err != nil {
		t.Fatal(err)
	}
	clean, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(clean)
	for i := 0; i < size; i += os.Getpagesize() {
		if clean[i] != 'a' {
			t.Fatal("the clean mapping does not read the file")
		}
	}
	pages := size / os.Getpagesize()
	if got := present(t, clean); got != pages {
		t.Fatalf("%d of the clean mapping's %d pages are present after reading them all", got, pages)
	}
	dev, ino := identity(t, path)
	released, err := release(cleanMappings(smaps(t), dev, ino))
	if err != nil {
		t.Fatal(err)
	}
	if got := present(t, clean); got != 0 || released != size {
		t.Errorf("%d of the clean mapping's pages present after releasing %d bytes; want none, %d bytes", got, released, size)
	}
	if written[0] != 'b' {
		t.Errorf("the written page reads %q after release; want the process's write kept", written[0])
	}
	if clean[0] != 'a' || clean[size-1] != 'a' {
		t.Error("the released mapping no longer reads the file")
	}
}

// present counts b's pages in the process's page tables.
func present(t *testing.T, b []byte) int {
	t.Helper()
	n, err := pagemap.Present(reflect.ValueOf(b).Pointer(), uintptr(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Mappings that do not hold the executable's code are not the process's
// own (qemu-user before 8.1 shows its host's /proc/self/smaps to the guest):
// nothing is released, where dropping pages at those addresses zeroed the
// guest's heap.
func TestReleaseRefusesMappingsNotHoldingItsCode(t *testing.T) {
	dev, ino := identity(t, "/proc/self/exe")
	code := reflect.ValueOf(Release).Pointer()
	elsewhere := code ^ 1<<(bits.UintSize-2) // as the host's address of the guest's code may be
	if released, err := releaseOwn(smaps(t), dev, ino, elsewhere); err == nil || released != 0 {
		t.Fatalf("releaseOwn with the code at %#x, outside every mapping = %d, %v; want an error and nothing released", elsewhere, released, err)
	}
	if released, err := releaseOwn(smaps(t), dev, ino, code); err != nil || released == 0 {
		t.Fatalf("releaseOwn with the code where it is = %d, %v; want pages released", released, err)
	}
}
