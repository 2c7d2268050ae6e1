package gpio

import (
	"fmt"
	"path/filepath"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"
)

// kernelDev is the real character device.
type kernelDev struct{}

func (kernelDev) ioctl(fd int, req uint, arg unsafe.Pointer) error {
	for {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
		switch errno {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return errno
	}
}

func (kernelDev) close(fd int) error { return unix.Close(fd) }

// systemChips lists the GPIO character devices (/dev/gpiochipN), each with
// its label and number of lines.
func systemChips() ([]hwChip, error) {
	paths, _ := filepath.Glob("/dev/gpiochip*") // the pattern is valid
	sort.Strings(paths)
	var chips []hwChip
	for _, path := range paths {
		fd, err := openChip(path)
		if err != nil {
			return nil, err
		}
		var info chipInfo
		err = kernelDev{}.ioctl(fd, ioctlChipInfo, unsafe.Pointer(&info))
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("%s: chip info: %w", path, err)
		}
		chips = append(chips, hwChip{name: cstring(info.Name[:]), label: cstring(info.Label[:]), path: path, lines: int(info.Lines)})
	}
	return chips, nil
}

func openChip(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening %s: %w", path, err)
	}
	return fd, nil
}
