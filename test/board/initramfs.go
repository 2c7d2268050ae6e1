package board

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
)

// initramfs is the guest's root file system: file contents by absolute path
// (directories are created as needed) and which files are executable.
type initramfs struct {
	files map[string][]byte
	exec  map[string]bool
}

func newInitramfs() *initramfs {
	return &initramfs{files: map[string][]byte{}, exec: map[string]bool{}}
}

func (r *initramfs) add(name string, data []byte, executable bool) {
	r.files[name] = data
	r.exec[name] = executable
}

func (r *initramfs) addFile(name, from string, executable bool) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	r.add(name, b, executable)
	return nil
}

// write stores the archive as a gzip'd cpio "newc" archive, the format the
// kernel unpacks into its root file system.
func (r *initramfs) write(to string) error {
	f, err := os.Create(to)
	if err != nil {
		return err
	}
	defer f.Close()
	z := gzip.NewWriter(f)
	dirs := map[string]bool{}
	var names []string
	for name := range r.files {
		names = append(names, name)
		for d := path.Dir(name); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for _, d := range []string{"/dev", "/proc", "/sys", "/state"} {
		dirs[d] = true
	}
	var dirList []string
	for d := range dirs {
		dirList = append(dirList, d)
	}
	sort.Strings(dirList) // parents before children
	sort.Strings(names)
	ino := 1
	for _, d := range dirList {
		if err := cpioEntry(z, ino, d[1:], 0o040755, nil); err != nil {
			return err
		}
		ino++
	}
	for _, name := range names {
		mode := 0o100644
		if r.exec[name] {
			mode = 0o100755
		}
		if err := cpioEntry(z, ino, name[1:], mode, r.files[name]); err != nil {
			return err
		}
		ino++
	}
	if err := cpioEntry(z, 0, "TRAILER!!!", 0, nil); err != nil {
		return err
	}
	if err := z.Close(); err != nil {
		return err
	}
	return f.Close()
}

func cpioEntry(w io.Writer, ino int, name string, mode int, data []byte) error {
	nlink := 1
	if mode&0o040000 != 0 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	buf := append([]byte(hdr), name...)
	buf = append(buf, 0)
	buf = pad4(buf)
	buf = append(buf, data...)
	buf = pad4(buf)
	_, err := w.Write(buf)
	return err
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
