package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/promcp"
)

// Options tune an Engine; the zero value is production behaviour.
type Options struct {
	// Now is the clock (tests inject one); defaults to time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Engine serves one device.
type Engine struct {
	m *manifest.Manifest
	p *policy.Policy
}

var errTODO = errors.New("engine: not implemented yet")

// New binds every capability of m to its bus in buses (keyed by bus name).
func New(m *manifest.Manifest, p *policy.Policy, buses map[string]drivers.Bus, opts Options) (*Engine, error) {
	return &Engine{m: m, p: p}, nil
}

// Manifest returns the device model the engine serves.
func (e *Engine) Manifest() *manifest.Manifest { return e.m }

// Tools lists read_*, do_* and can_do in manifest order.
func (e *Engine) Tools() []Tool { return nil }

// Read answers a read_* tool. The error is non-nil only for an unknown tool.
func (e *Engine) Read(ctx context.Context, tool string) (promcp.ReadResponse, error) {
	return promcp.ReadResponse{}, errTODO
}

// Do answers a do_* tool. Refusals and failures are DoResponses with status
// failed; the error is non-nil only for an unknown tool.
func (e *Engine) Do(ctx context.Context, caller Caller, tool string, req promcp.DoRequest) (promcp.DoResponse, error) {
	return promcp.DoResponse{}, errTODO
}

// CanDo answers can_do without acting.
func (e *Engine) CanDo(ctx context.Context, caller Caller, req promcp.CanDoRequest) (promcp.CapabilityReport, error) {
	return promcp.CapabilityReport{}, errTODO
}

// Close releases the buses.
func (e *Engine) Close() error { return nil }
