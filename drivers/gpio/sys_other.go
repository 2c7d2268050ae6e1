//go:build !linux

package gpio

import (
	"errors"
	"unsafe"
)

var errNotLinux = errors.New("GPIO needs Linux (the GPIO character device)")

type kernelDev struct{}

func (kernelDev) ioctl(int, uint, unsafe.Pointer) error { return errNotLinux }
func (kernelDev) close(int) error                       { return errNotLinux }

func systemChips() ([]hwChip, error) { return nil, errNotLinux }
func openChip(string) (int, error)   { return -1, errNotLinux }
