package modbus

import (
	"errors"
	"fmt"

	gb "github.com/goburrow/modbus"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/manifest"
)

// ErrQueueFull: the bus already has as many requests waiting as it accepts;
// the device is slower than the callers.
var ErrQueueFull = errors.New("request queue full")

// ErrClosed: the bus was closed.
var ErrClosed = errors.New("bus closed")

// OpError is a failed request with the context needed to find the fault: the
// bus, the unit, the function code and the range. Unwrap gives the cause, so
// errors.Is(err, drivers.ErrTimeout) and errors.As(err, **drivers.ModbusException) work.
type OpError struct {
	Bus      string // Describe() of the bus
	Unit     uint8
	Function uint8
	Table    manifest.ModbusTable
	Address  uint16
	Count    uint16
	// Merged, when not empty, is the coalesced request this one travelled in.
	Merged string
	Err    error
}

func (e *OpError) Error() string {
	verb := "read"
	if e.Function == fcWriteCoil || e.Function == fcWriteCoils || e.Function == fcWriteRegister || e.Function == fcWriteRegisters {
		verb = "write"
	}
	s := fmt.Sprintf("%s: unit %d FC%d %s %s %d", e.Bus, e.Unit, e.Function, verb, e.Table, e.Address)
	if e.Count != 1 {
		s += fmt.Sprintf(" count %d", e.Count)
	}
	if e.Merged != "" {
		s += " (in merged read " + e.Merged + ")"
	}
	return s + ": " + e.Err.Error()
}

func (e *OpError) Unwrap() error { return e.Err }

// Modbus function codes this driver uses.
const (
	fcReadCoils          = 1
	fcReadDiscreteInputs = 2
	fcReadHolding        = 3
	fcReadInput          = 4
	fcWriteCoil          = 5
	fcWriteRegister      = 6
	fcWriteCoils         = 15
	fcWriteRegisters     = 16
)

// mapException turns goburrow's exception error into the drivers type, so
// callers need not know which Modbus library is underneath. goburrow reports
// any reply whose function code differs from the request's as an exception;
// only fc|0x80 is one; another code is a mismatched reply (for a write: the
// device got the request, so its outcome is in doubt, not refused).
func mapException(err error, fc uint8) error {
	var me *gb.ModbusError
	if !errors.As(err, &me) {
		return err
	}
	if me.FunctionCode != fc|0x80 {
		return fmt.Errorf("reply has function code %d to a request with function %d", me.FunctionCode, fc)
	}
	return &drivers.ModbusException{Function: fc, Code: me.ExceptionCode}
}

// isException reports whether the device answered with an exception (it is
// alive and the framing is intact, but it refused the request).
func isException(err error) bool {
	var me *drivers.ModbusException
	return errors.As(err, &me)
}

// exceptionInDoubt reports whether a write answered with exception err may
// have been applied all the same: 4 (server device failure: it may have
// failed while acting), 5 (acknowledge: accepted, to be done later) and 11
// (gateway target failed to respond: the target had the frame, and its reply
// came too late for the gateway, or was lost). The others (illegal function,
// address or value; busy; a gateway path unavailable) refuse the request
// before it is acted on.
func exceptionInDoubt(err error) bool {
	var me *drivers.ModbusException
	return errors.As(err, &me) && (me.Code == 4 || me.Code == 5 || me.Code == 11)
}

// notSent marks a failure that came before any byte of the request left
// (validation, queue full, bus closed, deadline passed or cancelled while
// waiting for the bus, connect failed or timed out, backoff, port could not
// be opened or flushed, nothing of the frame accepted by the OS) with
// drivers.ErrNotSent: a write that failed so was certainly not applied, even
// when the failure is a timeout. A failure without the mark may have come
// after the device got the request.
func notSent(err error) error { return fmt.Errorf("%w: %w", drivers.ErrNotSent, err) }

// wasSent reports whether err may have come after the request left.
func wasSent(err error) bool { return !errors.Is(err, drivers.ErrNotSent) }
