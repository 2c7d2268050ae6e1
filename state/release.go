package state

import (
	"time"

	bolt "go.etcd.io/bbolt"
)

// Lookups and checkpoints read state.db through bbolt's read-only shared
// mapping of the file, and every new idempotency key lands at a random place
// in the index; the kernel maps the 64 KiB around each page touched
// (fault-around), so a burst of do_* calls leaves several MB of the file in
// the process's page tables (3.6-4.6 MB after 30,000 calls), though the next
// lookups need only a few pages. Once no checkpoint has been made for
// idleRelease, the store drops those pages from the page tables: they stay in
// the page cache and the ones needed come back on first touch. The mapping is
// read-only and bbolt writes through the file, so nothing is lost.
var idleRelease = 3 * time.Second

// releasePages drops the resident pages of the store's mapping of state.db.
func (s *Store) releasePages() {
	err := s.db.View(func(tx *bolt.Tx) error {
		// A read transaction holds bbolt's mapping lock: the file is not
		// remapped (the range unmapped and perhaps reused) while it runs, and
		// every page up to the transaction's size is inside the mapping.
		return dropPages(s.db.Info().Data, uintptr(tx.Size()))
	})
	if err != nil {
		s.log.Warn("state.db's pages not released", "err", err)
	}
}
