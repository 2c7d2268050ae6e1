//go:build !linux

package modbus

import (
	"errors"

	"github.com/physmcp/physmcpd/manifest"
)

func setRS485(string, *manifest.RS485) error {
	return errors.New("rs485: kernel direction control (TIOCSRS485) needs Linux")
}
