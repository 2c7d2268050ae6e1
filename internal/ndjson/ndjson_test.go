package ndjson

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadLine(t *testing.T) {
	long := strings.Repeat("x", 40) // longer than the reader's buffer
	r := bufio.NewReaderSize(strings.NewReader("a\r\n\n"+long+"\nlast"), 16)
	for _, want := range []string{"a", "", long, "last"} {
		got, err := ReadLine(r, 64)
		if err != nil || string(got) != want {
			t.Fatalf("ReadLine = %q, %v; want %q", got, err, want)
		}
	}
	if _, err := ReadLine(r, 64); err != io.EOF {
		t.Errorf("after the last line: %v, want io.EOF", err)
	}
}

func TestReadLineRefusesOverlongLines(t *testing.T) {
	ok := strings.Repeat("y", 10)
	r := bufio.NewReaderSize(strings.NewReader(ok+"\n"+ok+"z\n"), 16)
	if got, err := ReadLine(r, 10); err != nil || string(got) != ok {
		t.Fatalf("a line at the limit: %q, %v", got, err)
	}
	if _, err := ReadLine(r, 10); !errors.Is(err, ErrTooLong) {
		t.Errorf("a line over the limit: %v", err)
	}
	// found before the line is all read: a stream that never ends the line
	endless := bufio.NewReaderSize(io.MultiReader(strings.NewReader(ok), neverEnding{}), 16)
	if _, err := ReadLine(endless, 10); !errors.Is(err, ErrTooLong) {
		t.Errorf("an endless line: %v", err)
	}
	// no limit
	if got, err := ReadLine(bufio.NewReaderSize(strings.NewReader(ok+ok+ok+"\n"), 16), 0); err != nil || len(got) != 30 {
		t.Errorf("no limit: %d bytes, %v", len(got), err)
	}
}

// neverEnding is a stream of 'z' without a newline.
type neverEnding struct{}

func (neverEnding) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'z'
	}
	return len(p), nil
}
