package engine

import (
	"errors"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/promcp"
)

// refusal is a request the device answered with a refusal.
type refusal struct {
	value any // the value written; nil for a read
	err   error
}

// deviceException returns the exception when the device answered err's
// request with one. A gateway that cannot reach its target (10, 11) is not
// the device answering: the device behind it is unreachable.
func deviceException(err error) (*drivers.ModbusException, bool) {
	var ex *drivers.ModbusException
	if errors.As(err, &ex) && ex.Code != 10 && ex.Code != 11 {
		return ex, true
	}
	return nil, false
}

// deviceRefusal returns the exception when the device answered err's request
// and refused it: the request must change. A device that failed (4),
// accepted the request for later (5) or is busy (6) refused nothing about the
// request, and trying again later may succeed.
func deviceRefusal(err error) (*drivers.ModbusException, bool) {
	if ex, ok := deviceException(err); ok && ex.Code != 4 && ex.Code != 5 && ex.Code != 6 {
		return ex, true
	}
	return nil, false
}

// failurePermission is how a failed transaction is reported: the device
// refused it (the request must change), or it could not be reached (waiting
// may help).
func failurePermission(err error) promcp.Permission {
	if _, ok := deviceRefusal(err); ok {
		return promcp.DeviceRejected
	}
	// An adopted source's own checks refused: its permission stands.
	if d := (*drivers.Declined)(nil); errors.As(err, &d) && d.Permission != "" {
		return promcp.Permission(d.Permission)
	}
	return promcp.SourceUnreachable
}

func (pt *point) noteRefusal(value any, err error) {
	pt.mu.Lock()
	pt.refused = &refusal{value: value, err: err}
	pt.mu.Unlock()
}

func (pt *point) clearRefusal() {
	pt.mu.Lock()
	pt.refused = nil
	pt.mu.Unlock()
}

// refusedBefore is can_do's view of the device's refusals: reading the point
// drew an exception the last time, or writing value did.
func (pt *point) refusedBefore(value any) (decision, bool) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.lastErr != nil {
		if _, ok := deviceRefusal(pt.lastErr); ok {
			return deny(promcp.DeviceRejected, "the device refused the last read of %s: %v", pt.tool, pt.lastErr), true
		}
	}
	if r := pt.refused; r != nil && value != nil && sameValue(pt, r.value, value) {
		return deny(promcp.DeviceRejected, "the device refused writing %v the last time it was tried: %v", value, r.err), true
	}
	return decision{}, false
}
