package state

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/physmcp/physmcpd/engine"
)

// holdCommit starts a commit that stays open until release is called, so
// that other changes queue behind it; release returns its outcome once n
// changes are queued.
func holdCommit(s *Store) (release func(n int) error) {
	hold, held := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- s.commit(func(*bolt.Tx) error { close(held); <-hold; return nil })
	}()
	<-held
	return func(n int) error {
		for {
			s.group.mu.Lock()
			queued := len(s.group.queue)
			s.group.mu.Unlock()
			if queued == n {
				break
			}
			time.Sleep(time.Millisecond)
		}
		close(hold)
		return <-first
	}
}

// Changes queued while a commit is written share the next one, and a change
// that fails fails alone.
func TestGroupCommit(t *testing.T) {
	s := open(t, t.TempDir(), &clock{time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)})
	defer s.Close()
	before := s.Commits()
	release := holdCommit(s)
	const queued = 8
	errs := make([]error, queued)
	var wg sync.WaitGroup
	for i := range queued {
		wg.Go(func() {
			if i == 3 {
				errs[i] = s.commit(func(*bolt.Tx) error { return errors.New("bad change") })
				return
			}
			errs[i] = s.Save(fmt.Sprintf("k%d", i), engine.Record{Tool: "do_x", At: s.now()})
		})
	}
	if err := release(queued); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if (err != nil) != (i == 3) {
			t.Errorf("change %d: %v", i, err)
		}
		if _, ok := s.Load(fmt.Sprintf("k%d", i)); ok != (i != 3) {
			t.Errorf("record k%d stored: %v", i, ok)
		}
	}
	// one for the held change, one for the batch that failed, then each of the
	// eight alone: the batch is retried change by change
	if got := s.Commits() - before; got != 1+1+queued {
		t.Errorf("%d commits, want %d", got, 2+queued)
	}
}

// Without a failure, everything queued behind one commit shares the next.
func TestGroupCommitShares(t *testing.T) {
	s := open(t, t.TempDir(), &clock{time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)})
	defer s.Close()
	before := s.Commits()
	release := holdCommit(s)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			if err := s.RecordWrite(fmt.Sprintf("do_%d", i), engine.Write{At: s.now(), Value: 1.0, Seq: 1}, time.Minute); err != nil {
				t.Error(err)
			}
		})
	}
	if err := release(16); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got := s.Commits() - before; got != 2 {
		t.Errorf("%d commits for 1 + 16 changes, want 2", got)
	}
	if h, _ := s.LoadWrites(); len(h) != 16 {
		t.Errorf("%d histories stored, want 16", len(h))
	}
}
