package engine

import (
	"hash/maphash"
	"log/slog"
	"sync"
	"time"
)

// Without a state directory do_* outcomes live in memory, and memory on a
// small board is bounded whatever the call rate. MemoryStore keeps the
// records of the newest keys in full (replayed as stored), and of older keys
// within KeyRetention only that they were used and when (a 64-bit hash and
// a time, about 40 bytes each): a call with such a key is refused with
// Record.Forgotten, neither replayed nor executed again, since its write may
// have been applied. Beyond that bound the oldest keys are forgotten
// altogether, as all of them are at a restart; that is logged once. The
// state store (--state-dir) keeps every record for KeyRetention instead.
const (
	// DefaultMemoryRecords is how many do_* outcomes MemoryStore replays:
	// retries come within seconds or minutes, far fewer calls than this apart.
	DefaultMemoryRecords = 2048
	// DefaultMemoryKeys is how many older keys it still recognises (about
	// 5 MB when full): a day of one do_* every 0.7 s.
	DefaultMemoryKeys = 1 << 17
)

// MemoryStore is an IdempotencyStore that forgets on restart and holds a
// bounded number of records (see DefaultMemoryRecords).
type MemoryStore struct {
	now  func() time.Time
	log  *slog.Logger
	seed maphash.Seed

	mu      sync.Mutex
	recs    map[string]memRecord
	order   queue[keyGen] // the keys of recs in the order saved (with stale entries)
	gen     uint64
	used    map[uint64]time.Time // hashes of keys whose record went, and when it was saved
	usedSeq queue[uint64]        // those hashes in the order they went
	// maxRecs and maxKeys bound recs and used.
	maxRecs, maxKeys int
	dropped          bool // keys have been forgotten altogether (logged once)
}

type memRecord struct {
	r   Record
	gen uint64 // the save that put r, to tell order's stale entries
}

type keyGen struct {
	key string
	gen uint64
}

// NewMemoryStore returns an empty store with the default bounds; now is its clock.
func NewMemoryStore(now func() time.Time) *MemoryStore {
	return newMemoryStore(now, DefaultMemoryRecords, DefaultMemoryKeys, slog.Default())
}

func newMemoryStore(now func() time.Time, records, keys int, log *slog.Logger) *MemoryStore {
	return &MemoryStore{now: now, log: log, seed: maphash.MakeSeed(), recs: map[string]memRecord{},
		used: map[uint64]time.Time{}, maxRecs: max(records, 1), maxKeys: max(keys, 0)}
}

// Load returns the record for key if it is younger than KeyRetention: in
// full, or Forgotten when only the key's use is remembered.
func (s *MemoryStore) Load(key string) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if m, ok := s.recs[key]; ok {
		if now.Sub(m.r.At) > KeyRetention {
			return Record{}, false
		}
		return m.r, true
	}
	if at, ok := s.used[s.hash(key)]; ok && now.Sub(at) <= KeyRetention {
		return Record{Forgotten: true, At: at}, true
	}
	return Record{}, false
}

// Save stores r under key, then lets the oldest records go beyond the bounds.
func (s *MemoryStore) Save(key string, r Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.recs[key] = memRecord{r: r, gen: s.gen}
	s.order.push(keyGen{key, s.gen})
	delete(s.used, s.hash(key))
	s.trim(s.now().Add(-KeyRetention))
	return nil
}

// trim moves the oldest records beyond maxRecs to used, drops those older
// than cutoff, and keeps used within maxKeys.
func (s *MemoryStore) trim(cutoff time.Time) {
records:
	for s.order.len() > 0 {
		front := s.order.front()
		m, ok := s.recs[front.key]
		switch {
		case !ok || m.gen != front.gen: // saved again since, or gone
		case m.r.At.Before(cutoff):
			delete(s.recs, front.key)
		case len(s.recs) > s.maxRecs:
			delete(s.recs, front.key)
			h := s.hash(front.key)
			s.used[h] = m.r.At
			s.usedSeq.push(h)
		default:
			break records
		}
		s.order.pop()
	}
	for s.usedSeq.len() > 0 {
		h := s.usedSeq.front()
		at, ok := s.used[h]
		switch {
		case !ok:
		case at.Before(cutoff):
			delete(s.used, h)
		case len(s.used) > s.maxKeys:
			delete(s.used, h)
			if !s.dropped {
				s.dropped = true
				s.log.Warn("idempotency keys forgotten: without a state directory, physmcpd remembers the keys of the last "+
					"do_* calls only, and a retry with an older key would now be executed again; serve with --state-dir to keep every key for 24 h",
					"records", s.maxRecs, "keys", s.maxKeys, "oldest_kept", at)
			}
		default:
			return
		}
		s.usedSeq.pop()
	}
}

func (s *MemoryStore) hash(key string) uint64 { return maphash.String(s.seed, key) }

// queue is a FIFO on a slice that reuses its space.
type queue[T any] struct {
	items []T
	head  int
}

func (q *queue[T]) push(v T) { q.items = append(q.items, v) }
func (q *queue[T]) len() int { return len(q.items) - q.head }
func (q *queue[T]) front() T { return q.items[q.head] }
func (q *queue[T]) pop() {
	var zero T
	q.items[q.head] = zero
	q.head++
	if q.head >= 64 && q.head*2 >= len(q.items) {
		q.items = append(q.items[:0], q.items[q.head:]...)
		q.head = 0
	}
}
