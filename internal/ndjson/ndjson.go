// Package ndjson reads newline-delimited JSON-RPC messages (stdio, a serial
// line) one line at a time, without a copy when the line fits the reader's
// buffer and without buffering all of a line longer than the limit.
package ndjson

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// ErrTooLong ends a stream whose peer sent a message longer than the limit.
var ErrTooLong = errors.New("JSON-RPC message longer than the limit")

// ReadLine returns the next line without its line ending ("\n" or "\r\n"),
// valid until the next read from r. A line longer than limit bytes (no
// limit when limit <= 0) is ErrTooLong, found before it is all read; a last
// line without a newline is a line; then io.EOF.
func ReadLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if limit > 0 && len(line)+len(chunk) > limit+1 { // +1: the newline
			return nil, fmt.Errorf("%w (%d bytes)", ErrTooLong, limit)
		}
		switch {
		case err == nil && line == nil:
			return trimEOL(chunk), nil // the whole line was in the buffer: no copy
		case err == nil || (err == io.EOF && len(line)+len(chunk) > 0):
			return trimEOL(append(line, chunk...)), nil
		case err != bufio.ErrBufferFull:
			return nil, err
		}
		line = append(line, chunk...)
	}
}

func trimEOL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
