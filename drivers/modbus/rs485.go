package modbus

import (
	"fmt"

	"github.com/physmcp/physmcpd/manifest"
)

// checkRS485 refuses RS-485 options that would have no effect: they are only
// applied when the section is enabled.
func checkRS485(r *manifest.RS485) error {
	if r == nil || r.Enabled {
		if r != nil && (r.DelayRTSBeforeSendUs < 0 || r.DelayRTSAfterSendUs < 0) {
			return fmt.Errorf("rs485: delays must not be negative")
		}
		return nil
	}
	if r.RTSOnSend || r.RTSAfterSend || r.RXDuringTX || r.DelayRTSBeforeSendUs != 0 || r.DelayRTSAfterSendUs != 0 {
		return fmt.Errorf("rs485: options are set but enabled is false; set enabled: true or remove them")
	}
	return nil
}
