package state

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/physmcp/physmcpd/engine"
)

// bucketOps keeps start_* operations and sequences by id (engine.OperationStore).
var bucketOps = []byte("operations") // id → record (JSON)

// SaveOperation stores r under its id and returns once it is on disk.
func (s *Store) SaveOperation(r engine.OperationRecord) error {
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode operation %s: %w", r.ID, err)
	}
	if err := s.commit(func(tx *bolt.Tx) error { return tx.Bucket(bucketOps).Put([]byte(r.ID), v) }); err != nil {
		return fmt.Errorf("save operation %s: %w", r.ID, err)
	}
	return nil
}

// LoadOperations returns every stored operation.
func (s *Store) LoadOperations() ([]engine.OperationRecord, error) {
	var out []engine.OperationRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketOps).ForEach(func(k, v []byte) error {
			var r engine.OperationRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("operation %s: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

// DeleteOperations forgets the operations with ids.
func (s *Store) DeleteOperations(ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	return s.commit(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketOps)
		for _, id := range ids {
			if err := b.Delete([]byte(id)); err != nil {
				return err
			}
		}
		return nil
	})
}
