// Command load is physmcpd's load test: many concurrent MCP clients over
// streamable HTTP (loopback only) against the simulated example device,
// mixing read_*, can_do and do_*. It checks that nothing fails beyond policy
// refusals, that the device is never written more often than its cooldowns
// and rate limits allow, and that memory stays bounded, and prints
// throughput, latency percentiles and peak memory. Bounded in clients, calls
// and time. bench/load.sh runs it; `go test ./bench/load` runs a short version.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/policy"
)

// Config bounds one run.
type Config struct {
	Manifest, Policy string
	// Clients run concurrently; each initializes a session, then makes
	// Calls calls one after another.
	Clients int
	Calls   int
	// Timeout ends the run (as a failure) if it has not finished.
	Timeout time.Duration
	Seed    uint64
}

// Report is what a run measured.
type Report struct {
	Clients, Calls   int
	Elapsed          time.Duration
	ByTool           map[string]int
	Refusals         map[string]int // do_* refused by policy, by permission
	Errors           []string       // anything else that went wrong (first few)
	ErrorCount       int
	P50, P99, Max    time.Duration
	ToolP50          map[string]time.Duration
	Writes, Allowed  map[string]int64 // device writes by do tool, and the most the limits allow
	DoSuccesses      map[string]int
	PeakHeap         uint64 // runtime.MemStats.HeapInuse, sampled
	PeakRSS          uint64 // VmHWM of the process (clients and server together)
	HeapAfter        uint64 // HeapInuse after the run, clients closed, GC
	GoroutinesBefore int
	GoroutinesAfter  int
}

// Throughput is completed tool calls per second.
func (r *Report) Throughput() float64 { return float64(r.Calls) / r.Elapsed.Seconds() }

func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "clients %d, tool calls %d in %s: %.0f calls/s\n", r.Clients, r.Calls, r.Elapsed.Round(time.Millisecond), r.Throughput())
	fmt.Fprintf(&b, "latency p50 %s, p99 %s, max %s\n", r.P50.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond), r.Max.Round(time.Millisecond))
	fmt.Fprintf(&b, "calls by tool: %v\n", r.ByTool)
	fmt.Fprintf(&b, "p50 by tool: %v\n", r.ToolP50)
	fmt.Fprintf(&b, "do_* refused by policy: %v\n", r.Refusals)
	for _, tool := range slices.Sorted(maps.Keys(r.Writes)) {
		fmt.Fprintf(&b, "%s: %d device writes (%d successful calls), limits allow at most %d\n", tool, r.Writes[tool], r.DoSuccesses[tool], r.Allowed[tool])
	}
	fmt.Fprintf(&b, "peak heap in use %.1f MiB, peak RSS %.1f MiB, heap after %.1f MiB\n", mib(r.PeakHeap), mib(r.PeakRSS), mib(r.HeapAfter))
	fmt.Fprintf(&b, "goroutines before %d, after %d\n", r.GoroutinesBefore, r.GoroutinesAfter)
	fmt.Fprintf(&b, "errors: %d\n", r.ErrorCount)
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	return b.String()
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

// Failed says why the run does not hold, or "" when it does.
func (r *Report) Failed() string {
	var why []string
	if r.ErrorCount > 0 {
		why = append(why, fmt.Sprintf("%d errors beyond policy refusals", r.ErrorCount))
	}
	for tool, n := range r.Writes {
		if n > r.Allowed[tool] {
			why = append(why, fmt.Sprintf("%s written %d times, limits allow %d", tool, n, r.Allowed[tool]))
		}
		if n != int64(r.DoSuccesses[tool]) {
			why = append(why, fmt.Sprintf("%s written %d times for %d successful calls", tool, n, r.DoSuccesses[tool]))
		}
	}
	// Generous bounds: what matters is that memory does not grow with the
	// number of calls (the heap after the run, with clients gone, stays small).
	if limit := uint64(r.Clients)*(1<<20) + 256<<20; r.PeakHeap > limit {
		why = append(why, fmt.Sprintf("peak heap %.0f MiB over %.0f MiB", mib(r.PeakHeap), mib(limit)))
	}
	if r.HeapAfter > 64<<20 {
		why = append(why, fmt.Sprintf("heap after the run %.0f MiB: something is retained", mib(r.HeapAfter)))
	}
	if r.GoroutinesAfter > r.GoroutinesBefore+5 {
		why = append(why, fmt.Sprintf("goroutines grew from %d to %d", r.GoroutinesBefore, r.GoroutinesAfter))
	}
	return strings.Join(why, "; ")
}

// device is the engine under load with its simulated buses.
type device struct {
	m     *manifest.Manifest
	p     *policy.Policy
	e     *engine.Engine
	buses map[string]drivers.Bus
}

type simBus interface {
	Writes() int64
	SetFaults(timeoutRate, errorRate float64)
}

func openDevice(cfg Config) (*device, error) {
	m, diags := manifest.Load(cfg.Manifest)
	if m == nil {
		return nil, fmt.Errorf("manifest: %s", diags)
	}
	p, diags := policy.Load(cfg.Policy, m)
	if p == nil {
		return nil, fmt.Errorf("policy: %s", diags)
	}
	buses, err := drivers.OpenAll(context.Background(), m, nil, sim.Open, true)
	if err != nil {
		return nil, err
	}
	for name, b := range buses {
		sb, ok := b.(simBus)
		if !ok {
			return nil, fmt.Errorf("bus %s is not simulated", name)
		}
		// Injected device faults would be errors the server did not make;
		// latency and jitter stay.
		sb.SetFaults(0, 0)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.New(m, p, buses, engine.Options{Logger: quiet})
	if err != nil {
		return nil, err
	}
	return &device{m: m, p: p, e: e, buses: buses}, nil
}

// allowedWrites is the most writes the cooldown and every rate limit on a do
// capability allow within d: each limit alone caps it, the least cap holds.
func (dev *device) allowedWrites(c *manifest.Capability, d time.Duration) int64 {
	best := int64(math.MaxInt64)
	if cd := c.Cooldown(); cd > 0 {
		best = min(best, int64(d/cd)+1)
	}
	rates := []*manifest.Rate{c.RateLimit}
	for _, r := range dev.p.Rules(c.ToolName()) {
		if r.Rate != nil {
			rates = append(rates, r.Rate.Max)
		}
	}
	if dev.p.Defaults != nil {
		rates = append(rates, dev.p.Defaults.RateLimit)
	}
	for _, r := range rates {
		if r != nil {
			best = min(best, int64(r.Count)*(int64(d/r.Per)+1))
		}
	}
	return best
}

// call is one tool call a client makes, chosen at random.
type call struct {
	tool string
	args map[string]any
}

// mix is the example device's workload: mostly reads, can_do before acting,
// and writes that contend for the same cooldowns.
func mix(rng *rand.Rand) call {
	switch n := rng.IntN(10); {
	case n < 4:
		return call{tool: []string{"read_air_temperature", "read_heater_setpoint", "read_door_closed", "read_heater_flow_temperature"}[rng.IntN(4)]}
	case n < 7:
		return call{tool: "can_do", args: map[string]any{"intent": map[string]any{
			"semantic_tags": []any{"heating", "temperature"}, "action": "set", "target": "heater_setpoint", "value": 18 + rng.IntN(6)}}}
	case n < 9:
		return call{tool: "do_heater_setpoint", args: map[string]any{"value": float64(15 + rng.IntN(10))}}
	}
	return call{tool: "do_vent_fan", args: map[string]any{"value": rng.IntN(2) == 0}}
}

// policyRefusals are the do_* answers a busy device must give: refusals by
// its own rules, not failures.
var policyRefusals = []string{"cooldown_active", "rate_limited", "policy_denied", "permission_insufficient", "out_of_range", "requires_human_approval"}

type tally struct {
	mu        sync.Mutex
	latencies []time.Duration
	perTool   map[string][]time.Duration
	byTool    map[string]int
	refusals  map[string]int
	successes map[string]int
	errors    []string
	nErrors   int
}

func (t *tally) fail(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nErrors++
	if len(t.errors) < 10 {
		t.errors = append(t.errors, fmt.Sprintf(format, args...))
	}
}

// judge sorts one result: fine, a policy refusal, or an error.
func (t *tally) judge(c call, res *mcp.CallToolResult, took time.Duration) {
	body, _ := res.StructuredContent.(map[string]any)
	t.mu.Lock()
	t.latencies = append(t.latencies, took)
	t.perTool[c.tool] = append(t.perTool[c.tool], took)
	t.byTool[c.tool]++
	t.mu.Unlock()
	switch {
	case body == nil:
		t.fail("%s: no structured result", c.tool)
	case strings.HasPrefix(c.tool, "read_"):
		if body["quality"] != "good" || res.IsError {
			t.fail("%s: quality %v: %v", c.tool, body["quality"], body["detail"])
		}
	case c.tool == "can_do":
		if res.IsError {
			t.fail("can_do: isError")
		}
	case body["status"] == "success" || body["status"] == "partial":
		t.mu.Lock()
		t.successes[c.tool]++
		t.mu.Unlock()
	default:
		perm, _ := body["permission"].(string)
		if !slices.Contains(policyRefusals, perm) {
			t.fail("%s: %v %v: %v", c.tool, body["status"], perm, body["reason"])
			return
		}
		t.mu.Lock()
		t.refusals[perm]++
		t.mu.Unlock()
	}
}

// Run serves the device on a loopback port and runs the clients against it.
func Run(cfg Config) (*Report, error) {
	runtime.GC()
	rep := &Report{Clients: cfg.Clients, GoroutinesBefore: runtime.NumGoroutine()}
	dev, err := openDevice(cfg)
	if err != nil {
		return nil, err
	}
	operator := engine.Caller{Identity: "load", Role: manifest.RoleOperator}
	s, err := mcpserver.New(dev.e, mcpserver.Options{Name: "physmcpd-load", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Caller: func(context.Context) engine.Caller { return operator }})
	if err != nil {
		return nil, err
	}
	handler := mcpserver.NewHTTPHandler(s, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := httptest.NewUnstartedServer(handler)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	url := srv.URL + mcpserver.EndpointPath

	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	stopSampling := sampleMemory(&rep.PeakHeap)
	t := &tally{perTool: map[string][]time.Duration{}, byTool: map[string]int{}, refusals: map[string]int{}, successes: map[string]int{}}
	start := time.Now()
	var wg sync.WaitGroup
	var ready atomic.Int64
	for i := range cfg.Clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
			// Each client has its own connection, as separate agents would.
			conn := &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: 30 * time.Second}
			defer conn.CloseIdleConnections()
			tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPBasicClient(&http.Client{Transport: conn}))
			if err != nil {
				t.fail("client %d: %v", i, err)
				return
			}
			c := client.NewClient(tr)
			defer c.Close()
			if err := c.Start(ctx); err != nil {
				t.fail("client %d start: %v", i, err)
				return
			}
			init := mcp.InitializeRequest{}
			init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
			init.Params.ClientInfo = mcp.Implementation{Name: "physmcpd-load", Version: strconv.Itoa(i)}
			if _, err := c.Initialize(ctx, init); err != nil {
				t.fail("client %d initialize: %v", i, err)
				return
			}
			ready.Add(1)
			for range cfg.Calls {
				cl := mix(rng)
				req := mcp.CallToolRequest{}
				req.Params.Name = cl.tool
				req.Params.Arguments = cl.args
				began := time.Now()
				res, err := c.CallTool(ctx, req)
				if err != nil {
					t.fail("%s: %v", cl.tool, err)
					if errors.Is(ctx.Err(), context.DeadlineExceeded) {
						return
					}
					continue
				}
				t.judge(cl, res, time.Since(began))
			}
		})
	}
	wg.Wait()
	rep.Elapsed = time.Since(start)
	stopSampling()
	if ctx.Err() != nil {
		t.fail("the run did not finish within %s (%d of %d clients initialized)", cfg.Timeout, ready.Load(), cfg.Clients)
	}

	for _, c := range dev.m.Capabilities {
		if c.Kind != manifest.KindDo {
			continue
		}
		if rep.Writes == nil {
			rep.Writes, rep.Allowed = map[string]int64{}, map[string]int64{}
		}
		// Each example do capability is the only writer on its bus.
		rep.Writes[c.ToolName()] = dev.buses[c.Binding.Bus].(simBus).Writes()
		rep.Allowed[c.ToolName()] = dev.allowedWrites(c, rep.Elapsed)
	}
	srv.CloseClientConnections()
	handler.CloseSessions(context.Background())
	srv.Close()
	dev.e.Close()

	slices.Sort(t.latencies)
	rep.Calls = len(t.latencies)
	if n := len(t.latencies); n > 0 {
		rep.P50, rep.P99, rep.Max = t.latencies[n/2], t.latencies[n*99/100], t.latencies[n-1]
	}
	rep.ByTool, rep.Refusals, rep.DoSuccesses = t.byTool, t.refusals, t.successes
	rep.ToolP50 = map[string]time.Duration{}
	for tool, l := range t.perTool {
		slices.Sort(l)
		rep.ToolP50[tool] = l[len(l)/2]
	}
	rep.Errors, rep.ErrorCount = t.errors, t.nErrors
	rep.PeakRSS = peakRSS()
	rep.HeapAfter, rep.GoroutinesAfter = settle(rep.GoroutinesBefore)
	return rep, nil
}

// sampleMemory records the peak heap in use until stopped.
func sampleMemory(peak *uint64) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			*peak = max(*peak, ms.HeapInuse)
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

// settle waits (boundedly) for connection goroutines to end, then measures
// what is left.
func settle(before int) (heap uint64, goroutines int) {
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, runtime.NumGoroutine()
}

// peakRSS is the process's high-water resident set size (Linux), 0 elsewhere.
func peakRSS() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func main() {
	cfg := Config{}
	flag.StringVar(&cfg.Manifest, "manifest", "examples/physmcp.manifest.yml", "device manifest (its buses are simulated)")
	flag.StringVar(&cfg.Policy, "policy", "examples/physmcp.policy.yml", "policy")
	flag.IntVar(&cfg.Clients, "clients", 1000, "concurrent MCP clients (streamable HTTP sessions)")
	flag.IntVar(&cfg.Calls, "calls", 20, "tool calls per client")
	flag.DurationVar(&cfg.Timeout, "timeout", 2*time.Minute, "the run fails if it has not finished by then")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of the call mix")
	flag.Parse()
	rep, err := Run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(2)
	}
	fmt.Print(rep)
	if why := rep.Failed(); why != "" {
		fmt.Fprintln(os.Stderr, "FAIL:", why)
		os.Exit(1)
	}
	fmt.Println("PASS")
}
