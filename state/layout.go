package state

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/binenc"
)

// The layout of state.db, format 2. Records are kept in time order, each
// under its slot (when it was first saved) and key, so new records go to the
// right edge of the tree and pruning reads from the left; a small index maps
// each key to its slot. A do_* for a new key then reads only the index, and
// the pages its records fill are written once, full (format 1 kept records
// by key: random places in the tree, pages half full, all of them read).
//
// A store of format 1 (an older physmcpd's) is converted when it is opened,
// in one transaction: its records move as they are, JSON (engine.DecodeRecord reads
// both), and its id moves from meta "store_id" to meta "store". Older
// releases read the id from "store_id" only, so they refuse a format-2
// store ("has no store id") instead of serving from a table they would find
// empty while its records sit in buckets they do not know.

var (
	bucketIndex   = []byte("idem_index")   // key → slot (8 bytes: big-endian ns)
	bucketRecords = []byte("idem_records") // slot + key → record (engine.EncodeRecord)
	bucketWrites  = []byte("writes")       // tool → history (JSON)
	bucketMeta    = []byte("meta")

	keyFormat     = []byte("format")      // in meta: "2"; absent in format 1
	keyStoreID    = []byte("store")       // in meta: the id also kept in state.id
	keyLogApplied = []byte("log_applied") // in meta: the LSN state.log is applied up to

	// format 1
	legacyKeys    = []byte("idempotency")    // key → record (JSON)
	legacyByTime  = []byte("idempotency_at") // at + key → nothing
	legacyStoreID = []byte("store_id")       // in meta
)

const format = "2"

// maxKey bounds an idempotency key, tool name or operation id (bbolt takes
// keys of up to 32 KiB; the MCP schema, 128 characters).
const maxKey = 4096

// initBuckets creates the buckets of format 2 and marks the store so.
func initBuckets(tx *bolt.Tx) error {
	for _, b := range [][]byte{bucketIndex, bucketRecords, bucketWrites, bucketMeta, bucketOps} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketMeta).Put(keyFormat, []byte(format))
}

// storeID reads the store's id ("" when it has none) in either format.
func storeID(tx *bolt.Tx) string {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return ""
	}
	if id := meta.Get(keyStoreID); id != nil {
		return string(id)
	}
	return string(meta.Get(legacyStoreID))
}

// upgrade converts a store of format 1 to format 2; it does nothing to one
// of format 2. It returns how many records it moved.
func upgrade(tx *bolt.Tx, now time.Time) (int, error) {
	if meta := tx.Bucket(bucketMeta); meta != nil && string(meta.Get(keyFormat)) == format {
		return 0, nil
	}
	id := storeID(tx)
	if err := initBuckets(tx); err != nil {
		return 0, err
	}
	meta := tx.Bucket(bucketMeta)
	if id != "" {
		if err := meta.Put(keyStoreID, []byte(id)); err != nil {
			return 0, err
		}
	}
	if err := meta.Delete(legacyStoreID); err != nil {
		return 0, err
	}
	n := 0
	if old := tx.Bucket(legacyKeys); old != nil {
		err := old.ForEach(func(k, v []byte) error {
			at := now // an unreadable record stays, refused as in doubt, for a full retention
			if r, err := engine.DecodeRecord(string(k), v); err == nil {
				at = r.At
			}
			n++
			return put(tx, string(k), bytes.Clone(v), at)
		})
		if err != nil {
			return 0, err
		}
	}
	for _, b := range [][]byte{legacyKeys, legacyByTime} {
		if err := tx.DeleteBucket(b); err != nil && err != bolt.ErrBucketNotFound {
			return 0, err
		}
	}
	return n, nil
}

// slotKey is a record's key in bucketRecords.
func slotKey(slot []byte, key string) []byte {
	return append(slices.Clip(slot), key...)
}

// timeSlot orders records by when they were first saved; times before 1970
// sort first.
func timeSlot(at time.Time) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(max(at.UnixNano(), 0)))
}

// put stores the encoded record v under key: in its slot when the key has
// one, else in a new slot dated at.
func put(tx *bolt.Tx, key string, v []byte, at time.Time) error {
	index, recs := tx.Bucket(bucketIndex), tx.Bucket(bucketRecords)
	slot := index.Get([]byte(key))
	if slot == nil {
		slot = timeSlot(at)
		if err := index.Put([]byte(key), slot); err != nil {
			return err
		}
		// new slots come in time order: fill pages rather than split them in half
		recs.FillPercent = 0.95
	}
	return recs.Put(slotKey(slot, key), v)
}

// get returns key's encoded record, or nil.
func get(tx *bolt.Tx, key string) []byte {
	slot := tx.Bucket(bucketIndex).Get([]byte(key))
	if slot == nil {
		return nil
	}
	return tx.Bucket(bucketRecords).Get(slotKey(slot, key))
}

// prune drops the records last saved before cutoff. Those are all in slots
// before it (a record's slot is when it was first saved); a record saved
// again since stays until it expires too.
func prune(tx *bolt.Tx, cutoff time.Time) (int, error) {
	index, recs := tx.Bucket(bucketIndex), tx.Bucket(bucketRecords)
	var expired [][]byte
	c := recs.Cursor()
	for k, v := c.First(); k != nil && int64(binary.BigEndian.Uint64(k[:8])) < cutoff.UnixNano(); k, v = c.Next() {
		if r, err := engine.DecodeRecord(string(k[8:]), v); err == nil && !r.At.Before(cutoff) {
			continue
		}
		expired = append(expired, bytes.Clone(k))
	}
	for _, k := range expired {
		if err := recs.Delete(k); err != nil {
			return 0, err
		}
		if err := index.Delete(k[8:]); err != nil {
			return 0, err
		}
	}
	return len(expired), nil
}

// Ops: what a log entry asks of state.db.
const (
	opRecord          = 1 + iota // key's record is value (encoded), first saved at
	opCharge                     // a write charged to a point (key: the tool)
	opSaveOperation              // operation key is value (JSON)
	opDeleteOperation            // forget operation key
)

type op struct {
	kind  byte
	key   string
	at    time.Time
	value []byte
	write engine.Write
	keep  time.Duration
}

// encodeOps is the payload of one log entry: ops applied together or not at all.
func encodeOps(ops []op) ([]byte, error) {
	size := binary.MaxVarintLen64
	for _, o := range ops {
		size += 64 + len(o.key) + len(o.value) + len(o.write.Key) // a charge's value: a number, mostly
	}
	b := binary.AppendUvarint(make([]byte, 0, size), uint64(len(ops)))
	for _, o := range ops {
		if o.key == "" || len(o.key) > maxKey {
			return nil, fmt.Errorf("a key of %d bytes cannot be stored (1 to %d)", len(o.key), maxKey)
		}
		b = binenc.AppendString(append(b, o.kind), o.key)
		switch o.kind {
		case opRecord:
			b = binenc.AppendBytes(binenc.AppendTime(b, o.at), o.value)
		case opCharge:
			b = binenc.AppendTime(b, o.write.At)
			var err error
			if b, err = binenc.AppendValue(b, o.write.Value); err != nil {
				return nil, fmt.Errorf("the written value: %w", err)
			}
			b = binary.AppendUvarint(b, o.write.Seq)
			b = binenc.AppendString(b, o.write.Key)
			b = binary.AppendVarint(b, int64(o.keep))
		case opSaveOperation:
			b = binenc.AppendBytes(b, o.value)
		case opDeleteOperation:
		default:
			return nil, fmt.Errorf("unknown op %d", o.kind)
		}
	}
	return b, nil
}

func decodeOps(e []byte) ([]op, error) {
	d := binenc.Decoder{B: e}
	n := d.Uvarint()
	if n > uint64(len(e)) {
		return nil, binenc.ErrTruncated
	}
	ops := make([]op, 0, n)
	for range n {
		o := op{kind: d.Byte(), key: d.String()}
		switch o.kind {
		case opRecord:
			o.at = d.Time()
			o.value = d.Bytes()
		case opCharge:
			o.write.At = d.Time()
			o.write.Value = d.Value()
			o.write.Seq = d.Uvarint()
			o.write.Key = d.String()
			o.keep = time.Duration(d.Varint())
		case opSaveOperation:
			o.value = d.Bytes()
		case opDeleteOperation:
		default:
			d.Fail(fmt.Errorf("unknown op %d", o.kind))
		}
		ops = append(ops, o)
	}
	return ops, d.Done()
}

// apply makes o's change in state.db.
func apply(tx *bolt.Tx, log *slog.Logger, o op) error {
	a := newApplier(tx, log)
	if err := a.apply(o); err != nil {
		return err
	}
	return a.done()
}

// applier makes ops' changes in one transaction. A tool's write history is
// decoded at its first write and encoded once, by done: a checkpoint holds
// hundreds of writes of each tool, and decoding and encoding the history for
// every one was 1.2 % of a durable server's CPU.
type applier struct {
	tx        *bolt.Tx
	log       *slog.Logger
	histories map[string]*history // changed, to be stored by done
}

func newApplier(tx *bolt.Tx, log *slog.Logger) *applier {
	return &applier{tx: tx, log: log, histories: map[string]*history{}}
}

func (a *applier) apply(o op) error {
	switch o.kind {
	case opRecord:
		return put(a.tx, o.key, o.value, o.at)
	case opCharge:
		a.history(o.key).add(o.write, o.keep)
		return nil
	case opSaveOperation:
		return a.tx.Bucket(bucketOps).Put([]byte(o.key), o.value)
	case opDeleteOperation:
		return a.tx.Bucket(bucketOps).Delete([]byte(o.key))
	}
	return fmt.Errorf("unknown op %d", o.kind)
}

// done stores the write histories that changed.
func (a *applier) done() error {
	b := a.tx.Bucket(bucketWrites)
	for tool, h := range a.histories {
		v, err := json.Marshal(h)
		if err != nil {
			return err
		}
		if err := b.Put([]byte(tool), v); err != nil {
			return err
		}
	}
	clear(a.histories)
	return nil
}

// history is a point's write history as stored.
type history struct {
	Writes    []time.Time `json:"writes"`
	Last      time.Time   `json:"last"`
	LastValue any         `json:"last_value"`
	Seq       uint64      `json:"seq,omitempty"`
	Key       string      `json:"key,omitempty"`
}

// history is tool's history as stored, or as changed in this transaction. A
// history that cannot be decoded is started again (and said so): the write
// about to be added is already durable in the log, so it must be applied,
// and the newest write is what a cooldown runs from.
func (a *applier) history(tool string) *history {
	if h := a.histories[tool]; h != nil {
		return h
	}
	h := &history{}
	if v := a.tx.Bucket(bucketWrites).Get([]byte(tool)); v != nil {
		if err := json.Unmarshal(v, h); err != nil {
			a.log.Error("write history unreadable; started again from the latest write", "tool", tool, "err", err)
			*h = history{}
		}
	}
	a.histories[tool] = h
	return h
}

// add adds w to the history. Writes older than keep before w.At are
// dropped; the latest is always kept.
func (h *history) add(w engine.Write, keep time.Duration) {
	if !w.At.Before(h.Last) {
		h.Last, h.LastValue = w.At, w.Value
	}
	if w.Seq > h.Seq {
		h.Seq, h.Key = w.Seq, w.Key
	}
	h.Writes = append(h.Writes, w.At)
	slices.SortFunc(h.Writes, time.Time.Compare)
	kept := h.Writes[:0]
	for _, t := range h.Writes {
		if w.At.Sub(t) <= keep || t.Equal(h.Last) {
			kept = append(kept, t)
		}
	}
	h.Writes = kept
}
