package callpool

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// input hands out calls 0..n-1 to one reader at a time, as a bufio.Reader
// must be read, each once a previous call's send made it available.
type input struct {
	t       *testing.T
	lines   chan int
	reading atomic.Int32
	read    atomic.Int32 // calls next returned
}

func (in *input) next() (int, bool, error) {
	if in.reading.Add(1) != 1 {
		in.t.Error("two goroutines read at once")
	}
	defer in.reading.Add(-1)
	call, ok := <-in.lines
	if ok {
		in.read.Add(1)
	}
	return call, ok, nil
}

// runs records how often each call ran.
type runs struct {
	mu sync.Mutex
	n  map[int]int
}

func (r *runs) add(call int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[int]int{}
	}
	r.n[call]++
}

// The reader's call ends exactly when the take-over fires (the bubble's
// clock: both at TakeOverAfter), before and after it and between calls:
// exactly one goroutine reads at a time, every call runs once and the end
// of the input is reported once.
func TestOneReaderWhenTheTakeOverFiresAsTheCallEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 300
		in := &input{t: t, lines: make(chan int)}
		var ran runs
		p := Start(t.Context(), 2, 1, func(call int) {
			time.Sleep(TakeOverAfter * time.Duration(call%3)) // 0, exactly TakeOverAfter, twice it
			ran.add(call)
		})
		done := p.Read(t.Context(), in.next, func() bool { return false })
		go func() {
			for i := range n {
				in.lines <- i
				if i%2 == 0 {
					time.Sleep(TakeOverAfter) // sent as the call before ends, or as its take-over fires
				}
			}
			close(in.lines)
		}()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		p.Close()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("the reading ended twice (%v)", err)
		default:
		}
		ran.mu.Lock()
		defer ran.mu.Unlock()
		for i := range n {
			if ran.n[i] != 1 {
				t.Errorf("call %d ran %d times, want once", i, ran.n[i])
			}
		}
	})
}

// Calls that do not end stop the reading (Workers 1 and Queue 0, Lite's
// 2 and 8), so a fast peer waits on the line instead of filling memory: at
// most Workers run (the reader's own included), each worker holds one more
// while it waits for a slot, Queue wait and the reader holds one.
func TestReaderStopsWhenThePoolIsFull(t *testing.T) {
	for _, lim := range []struct{ workers, queue int }{{1, 0}, {2, 8}} {
		synctest.Test(t, func(t *testing.T) {
			in := &input{t: t, lines: make(chan int, 100)}
			for i := range 100 {
				in.lines <- i
			}
			release := make(chan struct{})
			p := Start(t.Context(), lim.workers, lim.queue, func(int) { <-release })
			done := p.Read(t.Context(), in.next, func() bool { return false }) // each line read alone
			time.Sleep(time.Second)
			synctest.Wait()
			if got, most := int(in.read.Load()), 2*lim.workers+lim.queue+1; got > most {
				t.Errorf("workers %d, queue %d: %d calls read while none ends, want at most %d", lim.workers, lim.queue, got, most)
			}
			close(release)
			close(in.lines)
			<-done
			p.Close()
		})
	}
}

// When the input ends while calls run (the reader's own, a worker's, one
// queued), Close returns only once each has run.
func TestCloseWaitsForEveryCallRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := &input{t: t, lines: make(chan int)}
		release := make(chan struct{})
		var ran runs
		p := Start(t.Context(), 2, 1, func(call int) { <-release; ran.add(call) })
		done := p.Read(t.Context(), in.next, func() bool { return false })
		for i := range 4 {
			in.lines <- i
			time.Sleep(2 * TakeOverAfter)
		}
		close(in.lines)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		closed := make(chan struct{})
		go func() { p.Close(); close(closed) }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while calls ran")
		default:
		}
		close(release)
		<-closed
		ran.mu.Lock()
		defer ran.mu.Unlock()
		if len(ran.n) != 4 {
			t.Errorf("ran %v, want calls 0-3 once each", ran.n)
		}
	})
}

// ctx ending while the reader runs a call and a worker waits for a slot
// with another: Wait returns (no deadlock) once the reader's call ends.
func TestWaitAfterCancelWithAWorkerWaitingForASlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		in := &input{t: t, lines: make(chan int)}
		release := make(chan struct{})
		p := Start(ctx, 1, 0, func(int) { <-release })
		done := p.Read(ctx, in.next, func() bool { return false })
		in.lines <- 0 // run by the reader
		time.Sleep(2 * TakeOverAfter)
		in.lines <- 1 // taken by the worker, which waits for the slot
		synctest.Wait()
		cancel()
		waited := make(chan struct{})
		go func() { p.Wait(); close(waited) }()
		synctest.Wait()
		select {
		case <-waited:
			t.Fatal("Wait returned while the reader's call ran")
		default:
		}
		close(release)
		<-waited
		close(in.lines)
		if err := <-done; err != nil && err != context.Canceled {
			t.Fatal(err)
		}
	})
}
