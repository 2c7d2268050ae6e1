package state

import (
	"sync"

	bolt "go.etcd.io/bbolt"
)

// Group commit. Every Save and RecordWrite must be on disk before it returns,
// and a bbolt commit costs two fdatasyncs whatever it holds. Callers that
// arrive while a commit is being written wait and then share the next one:
// one caller alone commits at once (no timer, unlike bbolt's Batch), and
// under load each commit serves everyone who queued behind the last.

// change is one caller's part of a commit.
type change struct {
	fn   func(*bolt.Tx) error
	done chan error    // the outcome, once committed or failed
	lead chan struct{} // told to write the next commit itself
}

// committer queues changes for the next commit; its zero value is ready.
type committer struct {
	mu      sync.Mutex
	queue   []*change
	writing bool // a commit is being written
	commits int64
}

// commit runs fn in a write transaction that may carry other callers'
// changes, and returns once that transaction is on disk. fn may run twice: a
// batch in which another change fails is rolled back and each change is then
// committed alone, so one bad change never fails the others.
func (s *Store) commit(fn func(*bolt.Tx) error) error {
	c := &change{fn: fn, done: make(chan error, 1), lead: make(chan struct{}, 1)}
	g := &s.group
	g.mu.Lock()
	g.queue = append(g.queue, c)
	if g.writing {
		g.mu.Unlock()
		select {
		case err := <-c.done:
			return err
		case <-c.lead: // the previous writer left this caller first in line
		}
	} else {
		g.writing = true
		g.mu.Unlock()
	}
	g.mu.Lock()
	batch := g.queue
	g.queue = nil
	g.mu.Unlock()
	n := s.write(batch)
	g.mu.Lock()
	g.commits += int64(n)
	if len(g.queue) > 0 {
		g.queue[0].lead <- struct{}{}
	} else {
		g.writing = false
	}
	g.mu.Unlock()
	return <-c.done
}

// write commits batch and answers each change; it returns how many commits it took.
func (s *Store) write(batch []*change) int {
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, c := range batch {
			if err := c.fn(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil || len(batch) == 1 {
		for _, c := range batch {
			c.done <- err
		}
		return 1
	}
	for _, c := range batch {
		c.done <- s.db.Update(c.fn)
	}
	return 1 + len(batch)
}

// Commits is how many write transactions the store has committed (or
// tried), for measuring what group commit saves.
func (s *Store) Commits() int64 {
	s.group.mu.Lock()
	defer s.group.mu.Unlock()
	return s.group.commits
}
