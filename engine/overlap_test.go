package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/promcp"
)

// overlapManifest has reads whose registers or bytes partly overlap a do_
// bound at another start address, and reads beside them that do not.
const overlapManifest = `physmcp_version: "0.1"
device: {id: overlap_rig, type: test_rig}
buses:
  mb: {type: modbus-tcp, address: 127.0.0.1:1502, simulated: true, simulation: {seed: 1}}
  i2c: {type: i2c, device: "1", simulated: true}
capabilities:
  - name: counter
    kind: read
    description: Both words of the counter, holding 0-1.
    binding: {bus: mb, unit: 1, table: holding, address: 0, data_type: uint32, byte_order: big, word_order: big}
    data_type: int
    semantic_tags: [counter]
    cache_ttl_ms: 60000
  - name: counter_low
    kind: do
    description: Set the counter's low word, holding 1.
    binding: {bus: mb, unit: 1, table: holding, address: 1, data_type: uint16}
    data_type: int
    range: {min: 0, max: 1000}
    semantic_tags: [counter]
    side_effects: ["the counter changes"]
    safe_value: 0
  - name: mode
    kind: read
    description: Mode word beside the counter, holding 2.
    binding: {bus: mb, unit: 1, table: holding, address: 2, data_type: uint16}
    data_type: int
    semantic_tags: [mode]
    cache_ttl_ms: 60000
    simulation: {initial: 7}
  - name: counter_input
    kind: read
    description: Input registers 0-1 of the same unit, another table than the holding register written.
    binding: {bus: mb, unit: 1, table: input, address: 0, data_type: uint32, byte_order: big, word_order: big}
    data_type: int
    semantic_tags: [counter]
    cache_ttl_ms: 60000
    simulation: {initial: 9}
  - name: other_unit
    kind: read
    description: Holding 0-1 of another unit.
    binding: {bus: mb, unit: 2, table: holding, address: 0, data_type: uint32, byte_order: big, word_order: big}
    data_type: int
    semantic_tags: [counter]
    cache_ttl_ms: 60000
    simulation: {initial: 11}
  - name: dac_word
    kind: read
    description: The DAC's 2-byte register 0x10-0x11.
    binding: {bus: i2c, address: "0x60:reg=0x10:width=2:byte_order=big"}
    data_type: int
    semantic_tags: [dac]
    cache_ttl_ms: 60000
  - name: dac_word
    kind: do
    description: Set the DAC's 2-byte register 0x10-0x11.
    binding: {bus: i2c, address: "0x60:reg=0x10:width=2:byte_order=big"}
    data_type: int
    range: {min: 0, max: 65535}
    semantic_tags: [dac]
    side_effects: ["the DAC output changes"]
    safe_value: 0
  - name: dac_trim
    kind: do
    description: Set the DAC's trim byte, register 0x11.
    binding: {bus: i2c, address: "0x60:reg=0x11"}
    data_type: int
    range: {min: 0, max: 255}
    semantic_tags: [dac]
    side_effects: ["the DAC output changes"]
    safe_value: 0
  - name: dac_gain
    kind: read
    description: The DAC's gain byte beside it, register 0x12.
    binding: {bus: i2c, address: "0x60:reg=0x12"}
    data_type: int
    semantic_tags: [dac]
    cache_ttl_ms: 60000
    simulation: {initial: 3}
  - name: other_device
    kind: read
    description: Register 0x10-0x11 of another device.
    binding: {bus: i2c, address: "0x61:reg=0x10:width=2:byte_order=big"}
    data_type: int
    semantic_tags: [dac]
    cache_ttl_ms: 60000
    simulation: {initial: 5}
`

func overlapRig(t *testing.T) *rig {
	t.Helper()
	path := filepath.Join(t.TempDir(), "overlap.manifest.yml")
	if err := os.WriteFile(path, []byte(overlapManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	return newRigFiles(t, path, "")
}

// readsFrom reads tool and checks its value and how many transactions it
// took on the bus (0: served from the cache).
func (r *rig) readsFrom(t *testing.T, bus simBus, tool string, want any, frames int64) {
	t.Helper()
	before := bus.Transactions()
	got := r.read(t, tool)
	if got.Value != want || got.Quality != promcp.QualityGood {
		t.Errorf("%s = %v (%s), want %v good", tool, got.Value, got.Quality, want)
	}
	if n := bus.Transactions() - before; n != frames {
		t.Errorf("%s took %d bus transactions, want %d", tool, n, frames)
	}
}

// A write changes every read whose registers or bytes it overlaps, whatever
// register each starts at: those reads are read again, not served from the
// cache until their TTL (a minute here) with the old value as good. Reads
// beside the write, in another table, unit or device, stay cached.
func TestWriteInvalidatesOverlappingReads(t *testing.T) {
	r := overlapRig(t)
	mb, i2c := r.bus(t, "mb"), r.bus(t, "i2c")
	reads := []struct {
		bus   simBus
		tool  string
		value int64
	}{
		{mb, "read_counter", 0}, {mb, "read_mode", 7}, {mb, "read_counter_input", 9}, {mb, "read_other_unit", 11},
		{i2c, "read_dac_word", 0}, {i2c, "read_dac_gain", 3}, {i2c, "read_other_device", 5},
	}
	for _, rd := range reads {
		r.readsFrom(t, rd.bus, rd.tool, rd.value, 1)
		r.readsFrom(t, rd.bus, rd.tool, rd.value, 0)
	}

	if resp := r.do(t, operator, "do_counter_low", 500, "low"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("do_counter_low: %+v", resp)
	}
	r.readsFrom(t, mb, "read_counter", int64(500), 1)
	if resp := r.do(t, operator, "do_dac_trim", 0x42, "trim"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("do_dac_trim: %+v", resp)
	}
	r.readsFrom(t, i2c, "read_dac_word", int64(0x42), 1)
	for _, rd := range reads {
		if rd.tool != "read_counter" && rd.tool != "read_dac_word" {
			r.readsFrom(t, rd.bus, rd.tool, rd.value, 0)
		}
	}
}

// A write whose outcome is lost may have changed the device: it drops the
// overlapping reads' cache as an applied write does.
func TestInDoubtWriteInvalidatesOverlappingReads(t *testing.T) {
	r := overlapRig(t)
	mb := r.bus(t, "mb")
	wire := &lossyWire{ModbusBus: r.buses["mb"].(drivers.ModbusBus)}
	r.e = wire.engine(t, r, engine.Options{})
	r.readsFrom(t, mb, "read_counter", int64(0), 1)
	r.readsFrom(t, mb, "read_mode", int64(7), 1)
	wire.lose.Store(1)
	if resp := r.do(t, operator, "do_counter_low", 300, "lost"); resp.Permission != promcp.SourceUnreachable || wire.applied.Load() != 1 {
		t.Fatalf("do_counter_low with its reply lost: %+v (%d applied)", resp, wire.applied.Load())
	}
	r.readsFrom(t, mb, "read_counter", int64(300), 1)
	r.readsFrom(t, mb, "read_mode", int64(7), 0)
}

// lossyI2C loses the outcome of the next lose writes it applies.
type lossyI2C struct {
	drivers.I2CBus
	lostReplies
}

func (l *lossyI2C) Tx(ctx context.Context, addr uint16, w, r []byte) error {
	if err := l.I2CBus.Tx(ctx, addr, w, r); err != nil || len(r) > 0 {
		return err
	}
	return l.answer()
}

// Two do_ on I2C bytes that may overlap (a 2-byte register at 0x10 and a
// byte at 0x11: on a chip with a byte-wide pointer, the same byte) write at
// one site: a retry of the 2-byte write whose outcome was lost, after the
// byte was written, answers superseded instead of writing both bytes again
// and undoing the byte's write.
func TestOverlappingI2CWritesShareTheirSite(t *testing.T) {
	r := overlapRig(t)
	wire := &lossyI2C{I2CBus: r.buses["i2c"].(drivers.I2CBus)}
	buses := map[string]drivers.Bus{}
	for name, b := range r.buses {
		buses[name] = b
	}
	buses["i2c"] = wire
	e, err := engine.New(r.e.Manifest(), r.e.Policy(), buses, engine.Options{Now: r.clock.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	r.e = e
	wire.applied.Store(0)
	wire.lose.Store(1)
	if resp := r.do(t, operator, "do_dac_word", 0x1234, "word"); resp.Permission != promcp.SourceUnreachable {
		t.Fatalf("do_dac_word with its outcome lost: %+v", resp)
	}
	if resp := r.do(t, operator, "do_dac_trim", 0x42, "trim"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("do_dac_trim: %+v", resp)
	}
	retry := r.do(t, operator, "do_dac_word", 0x1234, "word")
	if retry.Permission != promcp.Superseded || wire.applied.Load() != 2 {
		t.Fatalf("retry of the lost 2-byte write after the byte's = %+v, %d writes applied; want superseded and 2", retry, wire.applied.Load())
	}
	if got := r.read(t, "read_dac_word"); got.Value != int64(0x1242) {
		t.Fatalf("read_dac_word = %v, want 0x1242 (the byte's write kept)", got.Value)
	}
}

// fieldsManifest has three do_ on one I2C register: two disjoint fields
// (mask 0x0f, mask 0xf0) and the whole byte, which overlaps both.
const fieldsManifest = `physmcp_version: "0.1"
device: {id: fields_rig, type: test_rig}
buses:
  i2c: {type: i2c, device: "1", simulated: true}
  mb: {type: modbus-tcp, address: 127.0.0.1:1502, simulated: true}
capabilities:
  - name: lamp
    kind: do
    description: Switch the lamp, bit 0 of the control word.
    binding: {bus: mb, unit: 1, table: holding, address: 5, data_type: bit, bit: 0}
    data_type: bool
    semantic_tags: [lamp]
    side_effects: ["the lamp switches"]
  - name: horn
    kind: do
    description: Switch the horn, bit 1 of the control word.
    binding: {bus: mb, unit: 1, table: holding, address: 5, data_type: bit, bit: 1}
    data_type: bool
    semantic_tags: [horn]
    side_effects: ["the horn sounds"]
  - name: low_nibble
    kind: do
    description: Set the low field of the expander's control register.
    binding: {bus: i2c, address: 0x20, register: 0x01, mask: 0x0f}
    data_type: int
    range: {min: 0, max: 15}
    side_effects: ["the low outputs change"]
    semantic_tags: [outputs]
  - name: high_nibble
    kind: do
    description: Set the high field of the expander's control register.
    binding: {bus: i2c, address: 0x20, register: 0x01, shift: 4, mask: 0xf0}
    data_type: int
    range: {min: 0, max: 15}
    side_effects: ["the high outputs change"]
    semantic_tags: [outputs]
  - name: whole_byte
    kind: do
    description: Set the whole control register.
    binding: {bus: i2c, address: 0x20, register: 0x01}
    data_type: int
    range: {min: 0, max: 255}
    side_effects: ["every output changes"]
    semantic_tags: [outputs]
`

// A retry of an in-doubt write to one field of a register, after a write to
// another field of it, is settled by the device's value: the other field's
// read-modify-write kept this one's bits, so they still tell whether it was
// applied (here it was: confirmed, nothing written again). After a write of
// the whole register, which overwrote them, it is superseded.
func TestDisjointFieldsOfARegisterDoNotSupersedeEachOther(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fields.manifest.yml")
	if err := os.WriteFile(path, []byte(fieldsManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	r := newRigFiles(t, path, "")
	wire := &lossyI2C{I2CBus: r.buses["i2c"].(drivers.I2CBus)}
	plc := &lossyWire{ModbusBus: r.buses["mb"].(drivers.ModbusBus)}
	e, err := engine.New(r.e.Manifest(), r.e.Policy(), map[string]drivers.Bus{"i2c": wire, "mb": plc}, engine.Options{Now: r.clock.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	r.e = e
	wire.lose.Store(1)
	if resp := r.do(t, operator, "do_low_nibble", 5, "low"); resp.Permission != promcp.SourceUnreachable {
		t.Fatalf("do_low_nibble with its outcome lost: %+v", resp)
	}
	if resp := r.do(t, operator, "do_high_nibble", 3, "high"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("do_high_nibble: %+v", resp)
	}
	retry := r.do(t, operator, "do_low_nibble", 5, "low")
	if retry.Status != promcp.StatusSuccess || retry.AppliedValue != int64(5) || wire.applied.Load() != 2 {
		t.Fatalf("retry of the lost low field after the high field's write = %+v, %d writes applied; want confirmed and 2", retry, wire.applied.Load())
	}

	wire.lose.Store(1)
	if resp := r.do(t, operator, "do_low_nibble", 9, "low-2"); resp.Permission != promcp.SourceUnreachable {
		t.Fatalf("second do_low_nibble with its outcome lost: %+v", resp)
	}
	if resp := r.do(t, operator, "do_whole_byte", 0x35, "byte"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("do_whole_byte: %+v", resp)
	}
	if retry := r.do(t, operator, "do_low_nibble", 9, "low-2"); retry.Permission != promcp.Superseded || wire.applied.Load() != 4 {
		t.Fatalf("retry of the lost low field after the whole byte's write = %+v, %d writes applied; want superseded and 4", retry, wire.applied.Load())
	}

	// bits of one Modbus holding register, written read-modify-write
	plc.lose.Store(1)
	if resp := r.do(t, operator, "do_lamp", true, "lamp"); resp.Permission != promcp.SourceUnreachable {
		t.Fatalf("do_lamp with its reply lost: %+v", resp)
	}
	if resp := r.do(t, operator, "do_horn", true, "horn"); resp.Status != promcp.StatusSuccess {
		t.Fatalf("do_horn: %+v", resp)
	}
	if retry := r.do(t, operator, "do_lamp", true, "lamp"); retry.Status != promcp.StatusSuccess || plc.applied.Load() != 2 {
		t.Fatalf("retry of the lost lamp bit after the horn bit's write = %+v, %d writes applied; want confirmed and 2", retry, plc.applied.Load())
	}
}

// slowReads fails the nth read from now with a timeout, as an adapter whose
// clock is stretched too long; writes go through and are counted.
type slowReads struct {
	drivers.I2CBus
	nth, writes atomic.Int32
}

func (s *slowReads) Tx(ctx context.Context, addr uint16, w, r []byte) error {
	if len(r) > 0 && s.nth.Add(-1) == 0 {
		return fmt.Errorf("%w: clock stretched too long", drivers.ErrTimeout)
	}
	if len(r) == 0 {
		s.writes.Add(1)
	}
	return s.I2CBus.Tx(ctx, addr, w, r)
}

// A field's write whose read-modify-write read timed out never started: it
// is answered as not applied (not in doubt, not charged), and a retry with
// the key writes it, once.
func TestFieldWriteWhoseReadTimedOutWasNotSent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fields.manifest.yml")
	if err := os.WriteFile(path, []byte(fieldsManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	r := newRigFiles(t, path, "")
	wire := &slowReads{I2CBus: r.buses["i2c"].(drivers.I2CBus)}
	e, err := engine.New(r.e.Manifest(), r.e.Policy(), map[string]drivers.Bus{"i2c": wire, "mb": r.buses["mb"]}, engine.Options{Now: r.clock.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	r.e = e
	wire.nth.Store(2) // the value before, then the read of the read-modify-write
	resp := r.do(t, operator, "do_low_nibble", 5, "low")
	if resp.Status != promcp.StatusFailed || !strings.Contains(resp.Reason, "nothing was applied") || wire.writes.Load() != 0 {
		t.Fatalf("do_low_nibble with its read timed out = %+v (%d writes), want not applied and none", resp, wire.writes.Load())
	}
	if retry := r.do(t, operator, "do_low_nibble", 5, "low"); retry.Status != promcp.StatusSuccess || wire.writes.Load() != 1 {
		t.Fatalf("retry = %+v (%d writes), want applied once", retry, wire.writes.Load())
	}
}
