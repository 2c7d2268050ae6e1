package audit

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// tailChunk is how much of a file Tail reads at a time, from its end.
const tailChunk = 16 << 10

// Tail returns the trail's last n lines (fewer when it has fewer), oldest
// first, without their newlines. It reads the newest files backwards from
// their end, so its cost follows n, not the size of the trail, and it takes
// no lock: a line still being appended (no newline yet) is left out.
func (l *Log) Tail(n int) ([][]byte, error) {
	if n <= 0 {
		return nil, nil
	}
	files, err := trailFiles(l.dir)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for i := len(files) - 1; i >= 0 && len(out) < n; i-- {
		lines, err := tailFile(filepath.Join(l.dir, files[i]), n-len(out))
		if err != nil {
			return nil, err
		}
		out = append(lines, out...)
	}
	return out, nil
}

// tailFile returns the file's last n complete lines, oldest first.
func tailFile(path string, n int) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	// Read until the buffer holds n lines and the newline before the first
	// of them, or the start of the file.
	var buf []byte
	off := st.Size()
	for off > 0 && bytes.Count(buf, []byte("\n")) <= n {
		size := min(off, tailChunk)
		off -= size
		chunk := make([]byte, size, size+int64(len(buf)))
		if _, err := f.ReadAt(chunk, off); err != nil && err != io.EOF {
			return nil, fmt.Errorf("audit: read %s: %w", path, err)
		}
		buf = append(chunk, buf...)
	}
	end := bytes.LastIndexByte(buf, '\n')
	if end < 0 {
		return nil, nil
	}
	lines := bytes.Split(buf[:end], []byte("\n"))
	if off > 0 {
		lines = lines[1:] // begins before the buffer
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return slices.Clip(lines), nil
}
