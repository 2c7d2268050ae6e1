// Package callpool runs the calls a stream transport reads (stdio, a serial
// line): at most Workers at once, Queue more waiting, and the reader waiting
// beyond that. A call that arrives alone, with nothing queued, no more input
// read and a slot free, runs on the reader's own goroutine: handed to a
// worker, it readied a goroutine while a CPU was idle, so the runtime woke a
// second thread for it (a minimal Go stdio server, bench/compare/floor, ran
// 2.5 threads per call with such a hand-off and 1.3 without), and on two
// CPUs that thread competes with the process that answers (the device, the
// client).
// A call the reader runs that outlives TakeOverAfter hands the reading to a
// new goroutine, so that a cancellation or another request sent meanwhile is
// read.
package callpool

import (
	"context"
	"sync"
	"time"
)

// TakeOverAfter is how long the reader runs a call before another goroutine
// goes on reading: a message sent meanwhile waits at most this long.
const TakeOverAfter = time.Millisecond

// Pool runs calls of type T with run.
type Pool[T any] struct {
	run     func(T)
	slots   chan struct{} // one held by each call running
	queue   chan T
	workers sync.WaitGroup

	mu     sync.Mutex // guards closed and the Add of inline
	closed bool
	inline sync.WaitGroup // the calls the reader runs
}

// Start starts workers (at least one) that run the calls queued, queue at
// most, until ctx ends or Close.
func Start[T any](ctx context.Context, workers, queue int, run func(T)) *Pool[T] {
	workers = max(workers, 1)
	p := &Pool[T]{run: run, slots: make(chan struct{}, workers), queue: make(chan T, max(queue, 0))}
	for range workers {
		p.workers.Go(func() {
			for {
				select {
				case call, ok := <-p.queue:
					if !ok {
						return
					}
					// A worker may wait here with its call while the reader
					// runs one: up to one call a worker more than queue is
					// read ahead then (TestReaderStopsWhenThePoolIsFull).
					p.slots <- struct{}{}
					p.run(call)
					<-p.slots
				case <-ctx.Done():
					return
				}
			}
		})
	}
	return p
}

// Read reads calls with next on a goroutine of its own (at a time; see the
// package comment) and sends to the channel it returns what ended the
// reading: next's ok false with its error (nil at the input's end), or
// ctx's error. next reads messages and handles all but calls itself;
// buffered says whether input is read that next has not returned yet. Read
// is called once.
func (p *Pool[T]) Read(ctx context.Context, next func() (call T, ok bool, err error), buffered func() bool) <-chan error {
	done := make(chan error, 1)
	go p.read(ctx, next, buffered, done)
	return done
}

func (p *Pool[T]) read(ctx context.Context, next func() (T, bool, error), buffered func() bool, done chan<- error) {
	for {
		call, ok, err := next()
		if !ok {
			done <- err
			return
		}
		if !p.runsHere(buffered) {
			select {
			case p.queue <- call:
				continue
			case <-ctx.Done():
				done <- ctx.Err()
				return
			}
		}
		var takeOver *time.Timer
		ran := p.runInline(func() {
			takeOver = time.AfterFunc(TakeOverAfter, func() { p.read(ctx, next, buffered, done) })
			p.run(call)
		})
		<-p.slots
		if !ran {
			done <- ctx.Err() // Wait has begun: serving ended
			return
		}
		if !takeOver.Stop() {
			return // another goroutine reads now
		}
	}
}

// runsHere says whether the reader runs the call it just read, and takes
// its slot.
func (p *Pool[T]) runsHere(buffered func() bool) bool {
	if buffered() || len(p.queue) > 0 {
		return false
	}
	select {
	case p.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// runInline runs f on the caller's goroutine, counted for Wait, unless Wait
// has begun.
func (p *Pool[T]) runInline(f func()) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	p.inline.Add(1)
	p.mu.Unlock()
	defer p.inline.Done()
	f()
	return true
}

// Close, once the reading has ended (the reader was the queue's only
// sender), lets the workers run what is queued and waits for every call.
func (p *Pool[T]) Close() {
	close(p.queue)
	p.Wait()
}

// Wait waits for the calls running (the workers end with ctx or Close) and
// has the reader run no more.
func (p *Pool[T]) Wait() {
	p.workers.Wait()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.inline.Wait()
}
