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
	if err == nil {
		err = s.w.append(op{kind: opSaveOperation, key: r.ID, value: v})
	}
	if err != nil {
		return fmt.Errorf("save operation %s: %w", r.ID, err)
	}
	return nil
}

// LoadOperations returns every stored operation.
func (s *Store) LoadOperations() ([]engine.OperationRecord, error) {
	var out []engine.OperationRecord
	err := s.view(func(tx *bolt.Tx) error {
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

// DeleteOperations forgets the operations with ids, all at once.
func (s *Store) DeleteOperations(ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	ops := make([]op, len(ids))
	for i, id := range ids {
		ops[i] = op{kind: opDeleteOperation, key: id}
	}
	return s.w.append(ops...)
}
