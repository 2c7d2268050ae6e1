// Package metrics serves physmcpd's counts in the Prometheus text format at
// Path. A collector copies them out of the engine (engine.Stats), the audit
// trail and the HTTP session table when Prometheus scrapes, so the code that
// counts knows nothing of Prometheus and pays an atomic add per event. Every
// metric is described in docs/metrics.md.
package metrics

import (
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/physmcp/physmcpd/audit"
	"github.com/physmcp/physmcpd/engine"
)

// Path is where the metrics are served.
const Path = "/metrics"

// Sources are what a scrape reads. Engine is required; a nil Trail,
// Shipper or Sessions leaves their metrics out.
type Sources struct {
	Engine   *engine.Engine
	Trail    *audit.Log     // the audit trail, when one is kept
	Shipper  *audit.Shipper // the audit trail's remote sink, when there is one
	Sessions func() int     // open MCP sessions over HTTP
	// Version and Revision label physmcpd_build_info.
	Version, Revision string
}

// Registry is a registry of its own (not Prometheus' global one) with the
// Go runtime's and the process's collectors and physmcpd's.
func Registry(src Sources) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newCollector(src),
	)
	return reg
}

// Handler serves Path from src and hands every other path to next.
func Handler(src Sources, logger *slog.Logger, next http.Handler) http.Handler {
	if logger == nil {
		logger = slog.Default()
	}
	scrape := promhttp.HandlerFor(Registry(src), promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		// A collector that fails costs its metrics, not the others.
		ErrorHandling: promhttp.ContinueOnError,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != Path {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		scrape.ServeHTTP(w, r)
	})
}

const ns = "physmcpd_"

var (
	buildInfo = prometheus.NewDesc(ns+"build_info", "physmcpd's version and git revision, and the device it serves; always 1.",
		[]string{"version", "revision", "device_id"}, nil)

	toolCalls = prometheus.NewDesc(ns+"tool_calls_total", "Tool calls that reached the engine, per tool.",
		[]string{"tool", "verb"}, nil)
	toolRefusals = prometheus.NewDesc(ns+"tool_refusals_total",
		"Tool calls answered without acting, by the permission answered: read_* refused by the access rules, do_* answered status failed "+
			"(permission none: failed without one; key_busy: gave up waiting for another call with its idempotency key, nothing sent). "+
			"Series appear with the first refusal.",
		[]string{"tool", "verb", "permission"}, nil)
	callDuration = prometheus.NewDesc(ns+"tool_call_duration_seconds", "Time the engine took to answer a tool call, per verb.",
		[]string{"verb"}, nil)
	cacheHits = prometheus.NewDesc(ns+"read_cache_hits_total", "read_* calls answered from the read cache.",
		[]string{"tool"}, nil)
	cacheMisses = prometheus.NewDesc(ns+"read_cache_misses_total", "read_* calls that read the device (or joined a read of it under way).",
		[]string{"tool"}, nil)
	readQuality = prometheus.NewDesc(ns+"read_quality_total", "read_* answers by quality.",
		[]string{"tool", "quality"}, nil)
	replays = prometheus.NewDesc(ns+"idempotent_replays_total", "do_* calls answered from the idempotency store with the answer of an earlier call with the same key.",
		[]string{"tool"}, nil)

	busInfo = prometheus.NewDesc(ns+"bus_info", "A bus of the manifest and its type; always 1.",
		[]string{"bus", "type"}, nil)
	busTransactions = prometheus.NewDesc(ns+"bus_transactions_total", "Transactions handed to the bus driver, whatever their outcome.",
		[]string{"bus", "op"}, nil)
	busErrors = prometheus.NewDesc(ns+"bus_errors_total",
		"Failed transactions by kind, including those refused without reaching the bus (circuit_open, busy).",
		[]string{"bus", "kind"}, nil)
	busDuration = prometheus.NewDesc(ns+"bus_transaction_duration_seconds", "Time the driver took per transaction.",
		[]string{"bus"}, nil)
	breakerState = prometheus.NewDesc(ns+"breaker_state",
		"Circuit breaker of each device: 0 closed, 1 half-open (one probe is trying the device), 2 open (transactions fail at once).",
		[]string{"bus", "device"}, nil)
	breakerFailures = prometheus.NewDesc(ns+"breaker_consecutive_failures", "Consecutive transport failures of each device.",
		[]string{"bus", "device"}, nil)

	auditWritten = prometheus.NewDesc(ns+"audit_lines_written_total", "Lines appended to the audit trail since start.", nil, nil)
	auditShipped = prometheus.NewDesc(ns+"audit_lines_shipped_total", "Audit lines the remote sink acknowledged since start.", nil, nil)
	auditSinkUp  = prometheus.NewDesc(ns+"audit_sink_up", "1 while the audit remote sink takes lines, 0 after a failed send (lines wait in the trail).", nil, nil)

	sessionsOpen = prometheus.NewDesc(ns+"mcp_sessions_open", "Open MCP sessions over streamable HTTP.", nil, nil)
)

// breakerValue is breakerState's value for each state.
var breakerValue = map[string]float64{engine.BreakerClosed: 0, engine.BreakerProbing: 1, engine.BreakerOpen: 2}

// collector reads Sources at scrape time.
type collector struct {
	src Sources
	le  []float64 // engine.LatencyBounds in seconds
}

func newCollector(src Sources) *collector {
	c := &collector{src: src}
	for _, b := range engine.LatencyBounds {
		c.le = append(c.le, b.Seconds())
	}
	return c
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{buildInfo, toolCalls, toolRefusals, callDuration, cacheHits, cacheMisses, readQuality, replays,
		busInfo, busTransactions, busErrors, busDuration, breakerState, breakerFailures} {
		ch <- d
	}
	if c.src.Trail != nil {
		ch <- auditWritten
	}
	if c.src.Shipper != nil {
		ch <- auditShipped
		ch <- auditSinkUp
	}
	if c.src.Sessions != nil {
		ch <- sessionsOpen
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	e := c.src.Engine
	s := e.Stats()
	ch <- prometheus.MustNewConstMetric(buildInfo, prometheus.GaugeValue, 1, c.src.Version, c.src.Revision, e.Manifest().Device.ID)
	for _, t := range s.Tools {
		verb := string(t.Kind)
		ch <- prometheus.MustNewConstMetric(toolCalls, prometheus.CounterValue, float64(t.Calls), t.Tool, verb)
		for i, n := range t.Refusals {
			if n > 0 {
				ch <- prometheus.MustNewConstMetric(toolRefusals, prometheus.CounterValue, float64(n), t.Tool, verb, string(engine.RefusalPermissions[i]))
			}
		}
		switch t.Kind {
		case engine.ToolRead:
			ch <- prometheus.MustNewConstMetric(cacheHits, prometheus.CounterValue, float64(t.CacheHits), t.Tool)
			ch <- prometheus.MustNewConstMetric(cacheMisses, prometheus.CounterValue, float64(t.CacheMisses), t.Tool)
			for i, n := range t.Qualities {
				ch <- prometheus.MustNewConstMetric(readQuality, prometheus.CounterValue, float64(n), t.Tool, string(engine.Qualities[i]))
			}
		case engine.ToolDo:
			ch <- prometheus.MustNewConstMetric(replays, prometheus.CounterValue, float64(t.Replays), t.Tool)
		}
	}
	for _, verb := range []engine.ToolKind{engine.ToolRead, engine.ToolDo, engine.ToolCanDo} {
		ch <- c.histogram(callDuration, s.CallLatency[verb], string(verb))
	}
	for _, b := range s.Buses {
		ch <- prometheus.MustNewConstMetric(busInfo, prometheus.GaugeValue, 1, b.Bus, string(b.Type))
		ch <- prometheus.MustNewConstMetric(busTransactions, prometheus.CounterValue, float64(b.Reads), b.Bus, "read")
		ch <- prometheus.MustNewConstMetric(busTransactions, prometheus.CounterValue, float64(b.Writes), b.Bus, "write")
		for i, n := range b.Errors {
			ch <- prometheus.MustNewConstMetric(busErrors, prometheus.CounterValue, float64(n), b.Bus, engine.BusErrorKinds[i])
		}
		ch <- c.histogram(busDuration, b.Latency, b.Bus)
	}
	for _, d := range e.Devices() {
		ch <- prometheus.MustNewConstMetric(breakerState, prometheus.GaugeValue, breakerValue[d.State], d.Bus, d.Device)
		ch <- prometheus.MustNewConstMetric(breakerFailures, prometheus.GaugeValue, float64(d.Failures), d.Bus, d.Device)
	}
	if c.src.Trail != nil {
		ch <- prometheus.MustNewConstMetric(auditWritten, prometheus.CounterValue, float64(c.src.Trail.Written()))
	}
	if sh := c.src.Shipper; sh != nil {
		ch <- prometheus.MustNewConstMetric(auditShipped, prometheus.CounterValue, float64(sh.Shipped()))
		up := 1.0
		if sh.Failing() {
			up = 0
		}
		ch <- prometheus.MustNewConstMetric(auditSinkUp, prometheus.GaugeValue, up)
	}
	if c.src.Sessions != nil {
		ch <- prometheus.MustNewConstMetric(sessionsOpen, prometheus.GaugeValue, float64(c.src.Sessions()))
	}
}

// histogram turns an engine histogram into Prometheus' cumulative buckets.
func (c *collector) histogram(d *prometheus.Desc, h engine.Histogram, label string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(c.le))
	var cum uint64
	for i, le := range c.le {
		cum += h.Counts[i]
		buckets[le] = cum
	}
	return prometheus.MustNewConstHistogram(d, cum+h.Counts[len(c.le)], h.Sum.Seconds(), buckets, label)
}
