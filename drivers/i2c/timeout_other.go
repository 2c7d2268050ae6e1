//go:build !linux

package i2c

import "errors"

func setAdapterTimeout(string, int) error {
	return errors.New("timeout_ms needs Linux (I2C_TIMEOUT)")
}
