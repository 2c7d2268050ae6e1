//go:build !linux

package modbus

import (
	"errors"
	"time"

	"github.com/physmcp/physmcpd/manifest"
)

var errRS485Linux = errors.New("rs485: direction control needs Linux")

func sleep(d time.Duration) { time.Sleep(d) }

func setRS485(string, *manifest.RS485) error { return errRS485Linux }

type portCtl struct{}

func openCtl(string) (*portCtl, error)                             { return nil, errRS485Linux }
func (*portCtl) close()                                            {}
func (*portCtl) setRTS(bool) error                                 { return errRS485Linux }
func (*portCtl) waitSent(time.Duration, func(time.Duration)) error { return errRS485Linux }
