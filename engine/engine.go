package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
)

// Options tune an Engine; the zero value is production behaviour.
type Options struct {
	// Now is the clock (tests inject one); defaults to time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Idempotency stores do_* outcomes by key; defaults to an in-memory store
	// that keeps keys for 24 h.
	Idempotency IdempotencyStore
	// Quorum is the mesh quorum rules count on; nil means a lone node (1).
	Quorum Quorum
	// Limits persists the write history behind cooldowns and rate limits;
	// nil keeps it in memory (a restart resets it).
	Limits LimitStore
	// Audit receives an entry for every attempt to act (do_*, and start_*,
	// do_cancel_* and sequence refusals) and safe-state write;
	// nil records nothing. It is called synchronously.
	Audit func(AuditEntry)
	// ClockSynced reports whether the system clock is synchronised to a time
	// source; readings taken while it is not are degraded (ClockUnsynced).
	// It is asked before every read from a device, so it must be cheap.
	// nil means always.
	ClockSynced func() bool
	// Operations keeps start_* operations and sequences by id; nil keeps
	// them in memory (a restart forgets them).
	Operations OperationStore
}

// ErrUnknownTool is returned for a tool the device does not serve.
var ErrUnknownTool = errors.New("unknown tool")

// Engine serves one device.
type Engine struct {
	m      *manifest.Manifest
	p      *policy.Policy
	now    func() time.Time
	log    *slog.Logger
	idem   IdempotencyStore
	quorum Quorum
	synced func() bool // Options.ClockSynced

	history LimitStore
	auditFn func(AuditEntry)

	deadMu      sync.Mutex
	lastDo      time.Time // the latest do_* call, for the dead man
	deadTripped bool      // the safe state was applied since lastDo
	// deadUnsafe are the tools the dead man's safe state has not made safe
	// yet in this silence, tried again at deadRetry, deadBackoff after the
	// last attempt.
	deadUnsafe  []string
	deadRetry   time.Time
	deadBackoff time.Duration

	// cat is what the engine serves: tools, points, buses (catalog.go).
	cat atomic.Pointer[catalog]
	// adoptMu orders changes of the catalog; sites are shared by the
	// points of every catalog (written under it).
	adoptMu sync.Mutex
	sites   map[string]*site // by location
	// left are the do points retired from an adopted bus, by tool (under
	// adoptMu): a tool its bus offers again takes their write history, so
	// a device that left and came back keeps its cooldown and rate windows
	// though no Limits store persists them.
	left map[string]*point
	// unmatchedLogged is catalog.unmatched as last logged (under adoptMu).
	unmatchedLogged string
	onChangeMu      sync.Mutex
	onChange        []func()

	inflight sync.Mutex
	running  map[string]*keyedCall // do_* calls in progress, by idempotency key
	// lateReplies are the in-doubt writes whose late reply is awaited (awaitLateReply).
	lateReplies sync.WaitGroup

	faults faults // breakers, queues and write turns (breaker.go)

	ops *operations // start_* operations and sequences (operation.go)

	watches watches // subscriptions to readings (watch.go)
	events  events  // listeners to device changes (events.go)

	// Counters for Stats (stats.go); the buses' are in the catalog.
	canDoCounts toolCounters
	callLatency [len(verbs)]histogram
}

// point is a capability bound to its driver, with its read cache and limits.
type point struct {
	c    *manifest.Capability
	tool string
	// rules are the policy's rules for the tool: its own entry's, or a
	// pattern's (policy.Rules), looked up once when it is bound.
	rules    []*policy.Rule
	drv      drivers.Point
	outage   drivers.Outage // the driver, when it knows its source's outages (read.go); else nil
	busType  manifest.BusType
	location string
	site     *site
	// late is its bus's settle window: how long after a write frame was
	// given up on the device may still apply it (manifest.Bus.LateWrite).
	late time.Duration
	// ack is how long after the device acknowledged a write (exception 5)
	// it may still act on it (manifest.Bus.Acknowledge).
	ack    time.Duration
	dev    atomic.Pointer[device] // its breaker and queue, once looked up (breaker.go)
	bus    *busCounters
	counts toolCounters

	reads flight
	watch atomic.Pointer[watcher] // while somebody watches the reading (watch.go)

	mu       sync.Mutex
	last     *reading // latest successful read (plausible or not)
	lastGood *reading // latest plausible read
	lastErr  error    // error of the latest attempt, nil after a success
	// gen counts writes to the point's location; a read that saw it change
	// while under way is not cached.
	gen       uint64
	lastWrite time.Time
	writes    []time.Time // writes charged (applied or in doubt), oldest first, for rate limits
	latency   latencyEstimate
	running   []time.Time // start of each driver transaction under way (health.go)
	// refused is the latest request the device refused (exception reply), so
	// can_do can say so before the same request is tried again.
	refused *refusal
	// verdict is an adopted source's latest answer to can_do (verdict.go).
	verdict *verdict
	// quantised remembers the latest value quantised and its result: can_do
	// and do_* ask again for the same value, and encoding is exact
	// rational arithmetic.
	quantised struct{ in, out any }
	// enc is c.Encoding(), made once: it builds big.Rat values, which for
	// every do_*'s read-back were 2 % of a durable server's CPU.
	enc struct {
		once sync.Once
		e    manifest.Encoding
		ok   bool
	}

	vocab     map[string]bool // semantic tags and the words of the name, for can_do
	nameWords []string
	adopted   *manifest.AdoptedFrom // where an adopted capability comes from; nil for a local one
}

// encoding is pt.c.Encoding(), which never changes.
func (pt *point) encoding() (manifest.Encoding, bool) {
	pt.enc.once.Do(func() { pt.enc.e, pt.enc.ok = pt.c.Encoding() })
	return pt.enc.e, pt.enc.ok
}

// reading is one read as the engine keeps it.
type reading struct {
	value any
	at    time.Time
	stamp string // at as answers carry it, formatted once for every answer that serves the reading
	flag  string // why the value is implausible; empty when good
	// unsynced: taken while the system clock was not synchronised, so at
	// may be far off.
	unsynced bool
	// stale: an adopted source served its last good value (why).
	stale string
	// source: the device that measured it, when adopted from another.
	source string
}

// New binds every capability of m to its bus in buses (keyed by bus name).
func New(m *manifest.Manifest, p *policy.Policy, buses map[string]drivers.Bus, opts Options) (*Engine, error) {
	e := &Engine{
		m:       m,
		p:       p,
		now:     opts.Now,
		log:     opts.Logger,
		idem:    opts.Idempotency,
		quorum:  opts.Quorum,
		synced:  opts.ClockSynced,
		history: opts.Limits,
		auditFn: opts.Audit,
		sites:   map[string]*site{},
		left:    map[string]*point{},
		running: map[string]*keyedCall{},
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.idem == nil {
		e.idem = newMemoryStore(e.now, DefaultMemoryRecords, DefaultMemoryKeys, usedBlock, e.log)
	}
	if e.synced == nil {
		e.synced = func() bool { return true }
	}
	cat := &catalog{m: m, points: map[string]*point{}, byLocation: map[string][]*point{}, buses: buses, busCounts: map[string]*busCounters{}}
	var refused []*manifest.NotServed
	for _, c := range m.Capabilities {
		bus, ok := buses[c.Binding.Bus]
		if !ok {
			return nil, fmt.Errorf("capability %s: bus %q was not opened", c.ToolName(), c.Binding.Bus)
		}
		if ns := e.policyRefuses(c, c.Binding.Bus); ns != nil {
			refused = append(refused, ns)
			continue
		}
		if err := e.bind(cat, c, bus); err != nil {
			return nil, err
		}
	}
	if len(refused) > 0 { // served as the manifest says, but for those
		served := *m
		served.Capabilities = slices.DeleteFunc(slices.Clone(m.Capabilities), func(c *manifest.Capability) bool { return cat.points[c.ToolName()] == nil })
		served.NotServed = append(slices.Clone(m.NotServed), refused...)
		cat.m = &served
	}
	cat.seal(e.p)
	e.warnUnmatched(cat)
	e.cat.Store(cat)
	if err := e.restoreLimits(); err != nil {
		return nil, err
	}
	if err := e.restoreLate(); err != nil {
		return nil, err
	}
	if err := e.loadOperations(opts.Operations); err != nil {
		return nil, err
	}
	e.lastDo = e.now()
	return e, nil
}

// locationKey names the register or line a capability addresses on its bus.
func locationKey(c *manifest.Capability) string {
	b := c.Binding
	switch {
	case b.I2C != nil:
		return fmt.Sprintf("%s/i2c/%#x/%#x", b.Bus, b.I2C.Address, b.I2C.Register)
	case b.GPIO != nil:
		if b.GPIO.Line != "" {
			return fmt.Sprintf("%s/gpio/%s", b.Bus, b.GPIO.Line)
		}
		return fmt.Sprintf("%s/gpio/#%d", b.Bus, b.GPIO.Offset)
	case b.Modbus != nil:
		return fmt.Sprintf("%s/modbus/%d/%s/%d", b.Bus, b.Modbus.Unit, b.Modbus.Table, b.Modbus.Address)
	case b.Virtual != nil && c.Kind == manifest.KindDo:
		// a do_ and the read_ of the same value at the source share a location
		return fmt.Sprintf("%s/tool/%s", b.Bus, b.Virtual.ReadTool)
	case b.Virtual != nil:
		return fmt.Sprintf("%s/tool/%s", b.Bus, b.Virtual.Tool)
	}
	return b.Bus + "/" + c.ToolName()
}

// bind binds capability c to bus and adds its point to cat.
func (e *Engine) bind(cat *catalog, c *manifest.Capability, bus drivers.Bus) error {
	drv, err := drivers.BindWith(bus, c, drivers.BindOptions{Now: e.now})
	if err != nil {
		return fmt.Errorf("capability %s: %w", c.ToolName(), err)
	}
	pt := &point{c: c, tool: c.ToolName(), rules: e.p.Rules(c.ToolName()), drv: drv, busType: c.Binding.Type, location: locationKey(c), nameWords: words(c.Name), adopted: cat.m.AdoptedFrom(c),
		late: cat.m.Buses[c.Binding.Bus].LateWrite(), ack: cat.m.Buses[c.Binding.Bus].Acknowledge()}
	pt.outage, _ = drv.(drivers.Outage)
	if pt.bus = cat.busCounts[c.Binding.Bus]; pt.bus == nil {
		pt.bus = &busCounters{name: c.Binding.Bus, typ: c.Binding.Type}
		cat.busCounts[c.Binding.Bus] = pt.bus
	}
	pt.vocab = vocabulary(c, pt.nameWords)
	at := pt.location
	if c.WritesWith != nil {
		at = locationKey(c.WritesWith) // bytes shared with it, maybe: take turns
	}
	if pt.site = e.sites[at]; pt.site == nil {
		pt.site = &site{key: at, turn: make(chan struct{}, 1)}
		e.sites[at] = pt.site
	}
	cat.points[pt.tool] = pt
	cat.byLocation[pt.location] = append(cat.byLocation[pt.location], pt)
	return nil
}

// vocabulary is what can_do matches c on: its semantic tags and the words
// of its name.
func vocabulary(c *manifest.Capability, nameWords []string) map[string]bool {
	vocab := map[string]bool{}
	for _, t := range c.SemanticTags {
		vocab[strings.ToLower(t)] = true
	}
	for _, w := range nameWords {
		vocab[w] = true
	}
	return vocab
}

// toolList is the tools of m: its capabilities' read_* and do_* in manifest
// order, then stream_*, then the operations' tools, then can_do (last).
func toolList(m *manifest.Manifest) []Tool {
	var tools []Tool
	for _, c := range m.Capabilities {
		tools = append(tools, Tool{Name: c.ToolName(), Kind: ToolKind(c.Kind), Capability: c})
	}
	for _, c := range m.Capabilities {
		if c.Kind == manifest.KindRead && c.Streamable {
			tools = append(tools, Tool{Name: c.StreamTool(), Kind: ToolStream, Capability: c})
		}
	}
	for _, o := range m.Operations {
		if o.Kind == manifest.KindSequence {
			tools = append(tools, Tool{Name: o.SequenceTool(), Kind: ToolSequence, Operation: o})
			continue
		}
		tools = append(tools, Tool{Name: o.StartTool(), Kind: ToolStart, Operation: o},
			Tool{Name: o.StatusTool(), Kind: ToolStatus, Operation: o},
			Tool{Name: o.CancelTool(), Kind: ToolCancel, Operation: o})
	}
	return append(tools, Tool{Name: "can_do", Kind: ToolCanDo})
}

// Manifest returns the device model the engine serves: the manifest's,
// with the capabilities adopted since start-up (catalog.go).
func (e *Engine) Manifest() *manifest.Manifest { return e.catalog().m }

// Policy returns the policy in force (nil when none was given).
func (e *Engine) Policy() *policy.Policy { return e.p }

// Tools lists read_* and do_* in manifest order, then the operations' tools, then can_do.
func (e *Engine) Tools() []Tool { return append([]Tool(nil), e.catalog().tools...) }

func (e *Engine) lookup(tool string, kind manifest.Kind) (*point, error) {
	pt, ok := e.catalog().points[tool]
	if !ok || pt.c.Kind != kind {
		return nil, fmt.Errorf("%w %q", ErrUnknownTool, tool)
	}
	return pt, nil
}

// Close stops the running operations and releases the buses.
func (e *Engine) Close() error {
	e.stopOperations(func(*point) bool { return true }, "physmcpd stopped")
	e.StopWatches()
	var errs []error
	for name, b := range e.catalog().buses {
		if err := b.Close(); err != nil {
			errs = append(errs, fmt.Errorf("bus %s: %w", name, err))
		}
	}
	// Closed buses stop listening: what a reply proved is recorded first.
	e.lateReplies.Wait()
	return errors.Join(errs...)
}

func (e *Engine) deviceID() string { return e.m.Device.ID }

func unitOf(c *manifest.Capability) *string {
	if c.Unit == "" {
		return nil
	}
	u := c.Unit
	return &u
}

// timed runs one driver transaction under the capability's timeout and feeds
// the latency estimate can_do reports and the bus's counters.
func (e *Engine) timed(ctx context.Context, pt *point, op txOp, f func(context.Context) error) error {
	defer pt.done(pt.begin(e.now()))
	start := time.Now()
	b := newBudget(ctx, start.Add(pt.c.Timeout()))
	defer b.end()
	err := f(b)
	ran := time.Since(start)
	pt.mu.Lock()
	pt.latency.observe(ran)
	pt.mu.Unlock()
	pt.bus.sent(op, ran, err)
	return err
}
