//go:build !lite

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// hang stops p (SIGSTOP) and returns once every thread of it is stopped.
// kill(2) returns before the stop takes effect: the thread picked for the
// signal has to run to begin the group stop, and until it does the others
// keep serving. On a loaded host that is milliseconds, long enough for a
// can_do to be answered by the process a test believes hung.
func hang(t testing.TB, p *os.Process) {
	t.Helper()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	dir := fmt.Sprintf("/proc/%d/task", p.Pid)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		running, err := runningThreads(dir)
		if err != nil {
			t.Fatalf("is pid %d stopped? %v (this test needs Linux's /proc)", p.Pid, err)
		}
		if running == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: %d threads not stopped 5 s after SIGSTOP", p.Pid, running)
		}
	}
}

// runningThreads counts the threads under /proc/PID/task not in state T
// (stopped).
func runningThreads(dir string) (int, error) {
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, task := range tasks {
		stat, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if os.IsNotExist(err) {
			continue // the thread exited
		}
		if err != nil {
			return 0, err
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) {
			return 0, fmt.Errorf("%s/%s/stat: %q", dir, task.Name(), stat)
		}
		if stat[i+2] != 'T' {
			n++
		}
	}
	return n, nil
}
