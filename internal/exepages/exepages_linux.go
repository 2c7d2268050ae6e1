package exepages

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Release drops the resident pages of the executable's read-only mappings
// (code, read-only data, the function table) and returns how many bytes were
// resident in them. Only mappings backed by the executable's file whose pages
// all still equal the file's are dropped: a page the process (or a dynamic
// loader's relocations) wrote is private memory that dropping would lose, and
// a packed executable (UPX) runs from anonymous memory. Those are left alone.
func Release() (int64, error) {
	fi, err := os.Stat("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("executable: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("executable: no device and inode")
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	return releaseOwn(smaps, uint64(st.Dev), st.Ino, reflect.ValueOf(Release).Pointer())
}

// releaseOwn releases the executable's clean mappings once they are seen to
// hold its own code (at code). An emulator may show a process another's
// mappings: qemu-user before 8.1 passes /proc/self/smaps through from its
// host process, whose addresses are not the guest's (and, for a 32-bit
// guest, do not even fit its pointers), and dropping the pages at them
// zeroed the guest's heap: physmcpd died at start-up now and then under
// qemu-arm.
func releaseOwn(smaps []byte, dev, ino uint64, code uintptr) (int64, error) {
	ms := cleanMappings(smaps, dev, ino)
	if !slices.ContainsFunc(ms, func(m mapping) bool { return m.start <= code && code < m.end }) {
		return 0, fmt.Errorf("/proc/self/smaps does not show the executable's code at %#x among its %d clean mappings (an emulator's?): nothing released", code, len(ms))
	}
	return release(ms)
}

// release drops the clean read-only mappings of the file dev/ino that smaps
// lists.
func release(ms []mapping) (int64, error) {
	var released int64
	for _, m := range ms {
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, m.start, m.end-m.start, syscall.MADV_DONTNEED); errno != 0 {
			return released, fmt.Errorf("madvise %#x-%#x: %w", m.start, m.end, errno)
		}
		released += m.rss
	}
	return released, nil
}

type mapping struct {
	start, end uintptr
	rss        int64 // bytes
}

// cleanMappings reads smaps(5) for the mappings of file dev/ino that are not
// writable and hold no anonymous (copied-on-write) page.
func cleanMappings(smaps []byte, dev, ino uint64) []mapping {
	var out []mapping
	var cur *mapping
	var anon int64
	flush := func() {
		if cur != nil && anon == 0 {
			out = append(out, *cur)
		}
		cur, anon = nil, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			flush()
			// address perms offset dev inode [path]
			lo, hi, _ := strings.Cut(f[0], "-")
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			inode, err3 := strconv.ParseUint(f[4], 10, 64)
			if err1 != nil || err2 != nil || err3 != nil || end > uint64(^uintptr(0)) || strings.Contains(f[1], "w") || inode != ino || !sameDevice(f[3], dev) {
				continue
			}
			cur = &mapping{start: uintptr(start), end: uintptr(end)}
			continue
		}
		if cur == nil || len(f) != 3 || f[2] != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		switch {
		case err != nil:
			cur = nil // not a mapping this package understands
		case f[0] == "Rss:":
			cur.rss = kb << 10
		case f[0] == "Anonymous:":
			anon = kb
		}
	}
	flush()
	return out
}

// sameDevice reports whether smaps' "major:minor" (hexadecimal) is dev.
func sameDevice(s string, dev uint64) bool {
	ma, mi, ok := strings.Cut(s, ":")
	major, err1 := strconv.ParseUint(ma, 16, 32)
	minor, err2 := strconv.ParseUint(mi, 16, 32)
	return ok && err1 == nil && err2 == nil && major == devMajor(dev) && minor == devMinor(dev)
}

// devMajor and devMinor split a Linux dev_t as glibc's gnu_dev_major and
// gnu_dev_minor do.
func devMajor(dev uint64) uint64 { return (dev>>8)&0xfff | (dev>>32)&^0xfff }
func devMinor(dev uint64) uint64 { return dev&0xff | (dev>>12)&^0xff }
