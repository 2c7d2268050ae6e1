package engine

import (
	"sync"
	"time"
)

// Device changes as DeviceEvent reports them.
const (
	// DeviceUnreachable: a transaction with the device failed (timeout, I/O
	// error, no reply) where the one before was answered.
	DeviceUnreachable = "unreachable"
	// DeviceBreakerOpen: BreakerThreshold failures in a row opened the
	// device's circuit breaker; its tools fail at once until it is probed.
	DeviceBreakerOpen = "breaker_open"
	// DeviceReachable: the device answered again after failing; its breaker,
	// if it was open, is closed.
	DeviceReachable = "reachable"
)

// DeviceEvent is a change in whether a device answers.
type DeviceEvent struct {
	Change string
	// Health is the device's breaker after the change, with its tools.
	Health DeviceHealth
	At     time.Time
}

// events holds the listeners to device changes; its zero value is ready.
type events struct {
	mu        sync.Mutex
	listeners map[int]func(DeviceEvent)
	next      int
}

// OnDeviceEvent calls f for every DeviceEvent until remove is called. f runs
// on the goroutine of the transaction that caused the change: it must not
// block.
func (e *Engine) OnDeviceEvent(f func(DeviceEvent)) (remove func()) {
	e.events.mu.Lock()
	defer e.events.mu.Unlock()
	if e.events.listeners == nil {
		e.events.listeners = map[int]func(DeviceEvent){}
	}
	id := e.events.next
	e.events.next++
	e.events.listeners[id] = f
	return func() {
		e.events.mu.Lock()
		delete(e.events.listeners, id)
		e.events.mu.Unlock()
	}
}

// deviceChanged tells the listeners that d, pt's device, changed.
func (e *Engine) deviceChanged(d *device, pt *point, change string) {
	e.events.mu.Lock()
	listeners := make([]func(DeviceEvent), 0, len(e.events.listeners))
	for _, f := range e.events.listeners {
		listeners = append(listeners, f)
	}
	e.events.mu.Unlock()
	if len(listeners) == 0 {
		return
	}
	ev := DeviceEvent{Change: change, Health: d.health(pt.c.Binding.Bus), At: e.now()}
	cat := e.catalog()
	for _, t := range cat.tools {
		if other := cat.points[t.Name]; other != nil && e.device(other) == d {
			ev.Health.Tools = append(ev.Health.Tools, t.Name)
		}
	}
	for _, f := range listeners {
		f(ev)
	}
}
