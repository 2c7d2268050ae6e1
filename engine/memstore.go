package engine

import (
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Without a state directory do_* outcomes live in memory, and memory on a
// small board is bounded whatever the call rate. MemoryStore keeps the
// records of the newest keys in full (replayed as stored), and of older keys
// within KeyRetention only that they were used (a 64-bit hash each, in
// sorted blocks of usedBlock): a call with such a key is refused with
// Record.Forgotten, neither replayed nor executed again, since its write may
// have been applied. A block goes when its newest key is older than
// KeyRetention, so a key may be refused for up to one block's span longer. Beyond that bound the oldest keys are forgotten
// altogether, as all of them are at a restart; that is logged once. The
// state store (--state-dir) keeps every record for KeyRetention instead.
const (
	// DefaultMemoryRecords is how many do_* outcomes MemoryStore replays
	// (about 0.2 MB): retries come within seconds or minutes, far fewer
	// calls than this apart.
	DefaultMemoryRecords = 1024
	// DefaultMemoryKeys is how many older keys it still recognises (1 MB
	// when full): a day of one do_* every 0.7 s.
	DefaultMemoryKeys = 1 << 17
	// usedBlock is how many keys' hashes a block holds.
	usedBlock = 1024
)

// MemoryStore is an IdempotencyStore that forgets on restart and holds a
// bounded number of records (see DefaultMemoryRecords).
type MemoryStore struct {
	now  func() time.Time
	log  *slog.Logger
	seed maphash.Seed

	mu    sync.Mutex
	recs  map[string]memRecord
	order queue[keyGen] // the keys of recs in the order saved (with stale entries)
	gen   uint64
	// The keys whose record went, oldest first: sealed blocks, and the one
	// being filled (unsorted).
	blocks  queue[usedKeys]
	filling usedKeys
	// maxRecs and maxKeys bound recs and the keys in blocks of block keys.
	maxRecs, maxKeys, block int
	dropped                 bool // keys have been forgotten altogether (logged once)
}

// memRecord is a Record encoded as the state store keeps it (EncodeRecord:
// a replay answers the same values either way): about 140 bytes in one
// allocation instead of 1.2 KB in a dozen.
type memRecord struct {
	data []byte
	at   int64  // Record.At, Unix ns
	gen  uint64 // the save that put it, to tell order's stale entries
}

type keyGen struct {
	key string
	gen uint64
}

// usedKeys is a block of key hashes, sorted once sealed, and the newest
// record time among them (Unix ns).
type usedKeys struct {
	hashes []uint64
	newest int64
}

func (u usedKeys) sortedHas(h uint64) bool {
	_, ok := slices.BinarySearch(u.hashes, h)
	return ok
}

// NewMemoryStore returns an empty store with the default bounds; now is its clock.
func NewMemoryStore(now func() time.Time) *MemoryStore {
	return newMemoryStore(now, DefaultMemoryRecords, DefaultMemoryKeys, usedBlock, slog.Default())
}

func newMemoryStore(now func() time.Time, records, keys, block int, log *slog.Logger) *MemoryStore {
	return &MemoryStore{now: now, log: log, seed: maphash.MakeSeed(), recs: map[string]memRecord{},
		maxRecs: max(records, 1), maxKeys: max(keys, 0), block: max(block, 1)}
}

// Load returns the record for key if it is younger than KeyRetention: in
// full, or Forgotten when only the key's use is remembered. A record that
// cannot be decoded (it was encoded by Save, so never) is reported in doubt,
// so that the key is refused rather than acted on again.
func (s *MemoryStore) Load(key string) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cutoff := s.now().Add(-KeyRetention).UnixNano()
	if m, ok := s.recs[key]; ok {
		if m.at < cutoff {
			return Record{}, false
		}
		r, err := DecodeRecord(key, m.data)
		if err != nil {
			return Record{InDoubt: true, At: time.Unix(0, m.at)}, true
		}
		return r, true
	}
	s.expire(cutoff)
	h := s.hash(key)
	if slices.Contains(s.filling.hashes, h) {
		return Record{Forgotten: true, At: time.Unix(0, s.filling.newest)}, true
	}
	for i := range s.blocks.len() {
		if b := s.blocks.at(i); b.sortedHas(h) {
			return Record{Forgotten: true, At: time.Unix(0, b.newest)}, true
		}
	}
	return Record{}, false
}

// Save stores r under key, then lets the oldest records go beyond the bounds.
func (s *MemoryStore) Save(key string, r Record) error {
	data, err := EncodeRecord(key, r)
	if err != nil {
		return fmt.Errorf("encode the record: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.recs[key] = memRecord{data: data, at: r.At.UnixNano(), gen: s.gen}
	s.order.push(keyGen{key, s.gen})
	cutoff := s.now().Add(-KeyRetention).UnixNano()
	s.trim(cutoff)
	s.expire(cutoff)
	return nil
}

// trim drops records older than cutoff and moves the oldest beyond maxRecs
// to the used keys.
func (s *MemoryStore) trim(cutoff int64) {
	for s.order.len() > 0 {
		front := s.order.front()
		m, ok := s.recs[front.key]
		switch {
		case !ok || m.gen != front.gen: // saved again since, or gone
		case m.at < cutoff:
			delete(s.recs, front.key)
		case len(s.recs) > s.maxRecs:
			delete(s.recs, front.key)
			s.filling.hashes = append(s.filling.hashes, s.hash(front.key))
			s.filling.newest = max(s.filling.newest, m.at)
			if len(s.filling.hashes) == s.block {
				slices.Sort(s.filling.hashes)
				s.blocks.push(s.filling)
				s.filling = usedKeys{hashes: make([]uint64, 0, s.block)}
			}
		default:
			return
		}
		s.order.pop()
	}
}

// expire drops the blocks of used keys whose newest is older than cutoff,
// and the oldest beyond maxKeys.
func (s *MemoryStore) expire(cutoff int64) {
	for s.blocks.len() > 0 {
		oldest := s.blocks.front()
		switch {
		case oldest.newest < cutoff:
		case s.blocks.len()*s.block > s.maxKeys:
			if !s.dropped {
				s.dropped = true
				s.log.Warn("idempotency keys forgotten: without a state directory, physmcpd remembers the keys of the last "+
					"do_* calls only, and a retry with an older key would now be executed again; serve with --state-dir to keep every key for 24 h",
					"records", s.maxRecs, "keys", s.maxKeys, "forgotten_up_to", time.Unix(0, oldest.newest))
			}
		default:
			return
		}
		s.blocks.pop()
	}
}

func (s *MemoryStore) hash(key string) uint64 { return maphash.String(s.seed, key) }

// queue is a FIFO on a slice that reuses its space.
type queue[T any] struct {
	items []T
	head  int
}

func (q *queue[T]) push(v T)   { q.items = append(q.items, v) }
func (q *queue[T]) len() int   { return len(q.items) - q.head }
func (q *queue[T]) front() T   { return q.items[q.head] }
func (q *queue[T]) at(i int) T { return q.items[q.head+i] }
func (q *queue[T]) pop() {
	var zero T
	q.items[q.head] = zero
	q.head++
	if q.head >= 64 && q.head*2 >= len(q.items) {
		q.items = append(q.items[:0], q.items[q.head:]...)
		q.head = 0
	}
}
