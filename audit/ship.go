package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"
)

// Sender delivers lines to a remote sink (package audit/sink has syslog,
// HTTP and MQTT). Send returns nil only once the sink has taken every line,
// in order; after an error all of them are sent again, so a sink sees each
// line at least once.
type Sender interface {
	Send(ctx context.Context, lines [][]byte) error
	Close() error
}

// cursorFile records, in the trail's directory, the last line a sink took:
// the trail itself is the queue of lines still to ship, so nothing but this
// position needs to survive a restart or an outage.
const cursorFile = "SHIPPED"

// cursor is a position in the trail: the lines of File up to Line (ending
// at byte Offset) are shipped. Sink names the sink they were shipped to.
type cursor struct {
	Sink   string `json:"sink"`
	File   string `json:"file"`
	Line   int    `json:"line"`
	Offset int64  `json:"offset"`
}

// ShipOptions tune a Shipper; zero values take the defaults.
type ShipOptions struct {
	// Sink names the sink in the cursor (no secrets: it is written to disk).
	// A cursor for another sink is not used: the new sink gets the trail
	// from its oldest kept line.
	Sink string
	// MinBackoff and MaxBackoff bound the wait between failed sends
	// (default 1s and 1m), doubling from one to the other.
	MinBackoff, MaxBackoff time.Duration
	// MaxBatch is the most lines sent at once (default 100).
	MaxBatch int
	Logger   *slog.Logger
}

// maxBatchBytes keeps one send well under what HTTP servers and brokers
// take by default, whatever the lines' sizes (each is at most MaxEntryBytes).
const maxBatchBytes = 1 << 20

// Shipper sends every line of a trail to a Sender, in order and at least
// once, from a goroutine of its own, so Append never waits for the sink.
type Shipper struct {
	log    *Log
	sender Sender
	opts   ShipOptions
	cur    cursor
	cancel context.CancelFunc
	done   chan struct{}

	shipped atomic.Uint64 // lines the sink took since Ship
	down    atomic.Bool   // the latest send failed
}

// Shipped is the number of lines the sink has acknowledged since Ship.
func (s *Shipper) Shipped() uint64 { return s.shipped.Load() }

// Failing reports whether the latest send to the sink failed: lines wait in
// the trail until a send succeeds.
func (s *Shipper) Failing() bool { return s.down.Load() }

// Ship starts shipping l's lines to s from the position recorded in the
// trail's directory (from the oldest kept line when there is none). Close
// stops it and closes s.
func Ship(l *Log, s Sender, opts ShipOptions) (*Shipper, error) {
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = time.Second
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(time.Minute, opts.MinBackoff)
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 100
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	cur := cursor{Sink: opts.Sink}
	b, err := os.ReadFile(filepath.Join(l.dir, cursorFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("audit: %w", err)
	default:
		var saved cursor
		if err := json.Unmarshal(b, &saved); err != nil {
			return nil, fmt.Errorf("audit: %s is not valid: %w", filepath.Join(l.dir, cursorFile), err)
		}
		if saved.Sink == opts.Sink {
			cur = saved
		} else {
			opts.Logger.Info("audit sink changed: shipping the trail from its oldest kept line", "was", saved.Sink, "sink", opts.Sink)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	sh := &Shipper{log: l, sender: s, opts: opts, cur: cur, cancel: cancel, done: make(chan struct{})}
	go sh.run(ctx)
	return sh, nil
}

// Close stops shipping (lines not yet taken by the sink go at the next
// Ship) and closes the sender.
func (s *Shipper) Close() error {
	s.cancel()
	<-s.done
	return s.sender.Close()
}

func (s *Shipper) run(ctx context.Context) {
	defer close(s.done)
	var backoff time.Duration
	failing := false
	for {
		lines, next, err := s.pending()
		if err == nil && len(lines) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-s.log.appended:
			}
			continue
		}
		if err == nil {
			err = s.sender.Send(ctx, lines)
		}
		if ctx.Err() != nil {
			return
		}
		s.down.Store(err != nil)
		if err != nil {
			backoff = min(max(2*backoff, s.opts.MinBackoff), s.opts.MaxBackoff)
			if !failing {
				// once per outage: a sink down for hours must not flood the log
				s.opts.Logger.Warn("audit sink unreachable: lines wait in the trail and are shipped when it is back", "sink", s.opts.Sink, "err", err)
				failing = true
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		if failing {
			s.opts.Logger.Info("audit sink reachable again", "sink", s.opts.Sink)
			failing = false
		}
		backoff = 0
		s.shipped.Add(uint64(len(lines)))
		s.cur = next
		if err := writeCursor(filepath.Join(s.log.dir, cursorFile), next); err != nil {
			// the lines went; after a restart they go again (at least once)
			s.opts.Logger.Warn("audit sink position not saved", "err", err)
		}
	}
}

// pending reads up to MaxBatch lines after the cursor, and the cursor after
// them. A line still being written (no newline yet) waits for the next call.
func (s *Shipper) pending() ([][]byte, cursor, error) {
	files, err := trailFiles(s.log.dir)
	if err != nil {
		return nil, s.cur, err
	}
	i, found := slices.BinarySearch(files, s.cur.File)
	if s.cur.File != "" && !found && i < len(files) {
		// removed past retention before the sink took it: the queue is
		// bounded by the trail, so these lines are gone
		s.opts.Logger.Error("audit lines removed past retention before the sink took them", "sink", s.opts.Sink, "from", s.cur.File, "line", s.cur.Line+1, "resuming_at", files[i])
		s.cur = cursor{Sink: s.opts.Sink, File: files[i]}
	}
	cur := s.cur
	for ; i < len(files); i++ {
		if files[i] != cur.File {
			cur = cursor{Sink: s.opts.Sink, File: files[i]}
		}
		lines, next, err := readFrom(filepath.Join(s.log.dir, cur.File), cur, s.opts.MaxBatch)
		if err != nil || len(lines) > 0 {
			return lines, next, err
		}
	}
	return nil, cur, nil
}

// readFrom reads up to n complete lines of path after cur.
func readFrom(path string, cur cursor, n int) ([][]byte, cursor, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, cur, nil // removed past retention since it was listed
	}
	if err != nil {
		return nil, cur, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(cur.Offset, io.SeekStart); err != nil {
		return nil, cur, fmt.Errorf("audit: %w", err)
	}
	r := bufio.NewReaderSize(f, maxLine)
	var lines [][]byte
	size := 0
	for len(lines) < n && size < maxBatchBytes {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, cur, &BreakError{File: cur.File, Line: cur.Line + 1, Reason: "line too long"}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, cur, fmt.Errorf("audit: read %s: %w", path, err)
		}
		if err != nil { // EOF: a line without its newline is still being written
			break
		}
		lines = append(lines, slices.Clone(line[:len(line)-1]))
		size += len(line)
		cur.Line++
		cur.Offset += int64(len(line))
	}
	return lines, cur, nil
}

func writeCursor(path string, c cursor) error {
	b, _ := json.Marshal(c)
	return replaceFile(path, b)
}
