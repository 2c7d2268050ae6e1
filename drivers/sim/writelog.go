package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/physmcp/physmcpd/manifest"
)

// writeLog is a simulated bus's write_log: one JSON line per do point an
// applied write changed, fsync'd before the write returns, and read back when
// the bus opens so the simulated device keeps its state across restarts of
// the daemon, as real hardware does.
type writeLog struct {
	bus string
	f   *os.File
}

// logLine is one line of a write log.
type logLine struct {
	Time       time.Time `json:"time"`
	Bus        string    `json:"bus"`
	Capability string    `json:"capability"`
	Value      any       `json:"value"`
}

// openWriteLog restores the bus's do points from path (relative to the
// manifest's directory) and opens it for appending.
func (c *core) openWriteLog(m *manifest.Manifest, bus, path string) error {
	if !filepath.IsAbs(path) && m.File != "" {
		path = filepath.Join(filepath.Dir(m.File), path)
	}
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("write_log: %w", err)
	}
	// a line torn by a crash of the writer was never acknowledged: drop it
	if end := bytes.LastIndexByte(data, '\n') + 1; end < len(data) {
		if err := os.Truncate(path, int64(end)); err != nil {
			return fmt.Errorf("write_log: drop the torn last line: %w", err)
		}
		data = data[:end]
	}
	for n, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var l logLine
		if err := json.Unmarshal(line, &l); err != nil {
			return fmt.Errorf("write_log %s:%d: %w", path, n+1, err)
		}
		if l.Bus != bus {
			continue
		}
		p := c.byName[l.Capability]
		if p == nil || p.c.Kind != manifest.KindDo {
			continue
		}
		if err := p.cell.store(l.Value); err != nil {
			return fmt.Errorf("write_log %s:%d: restore %s = %v: %w", path, n+1, l.Capability, l.Value, err)
		}
		p.remember()
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("write_log: %w", err)
	}
	c.wlog = &writeLog{bus: bus, f: f}
	return nil
}

// append records the do points in touched and syncs (caller holds mu).
func (w *writeLog) append(now time.Time, touched []*simPoint) error {
	var buf []byte
	for _, p := range touched {
		b, err := json.Marshal(logLine{Time: now, Bus: w.bus, Capability: p.c.Name, Value: p.last.Load().v})
		if err != nil {
			return fmt.Errorf("write_log: %w", err)
		}
		buf = append(append(buf, b...), '\n')
	}
	if _, err := w.f.Write(buf); err != nil {
		return fmt.Errorf("write_log: %w", err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("write_log: %w", err)
	}
	return nil
}
