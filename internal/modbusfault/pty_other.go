//go:build !linux

package modbusfault

import (
	"errors"
	"os"
)

func openPTY() (*os.File, string, error) {
	return nil, "", errors.New("the RTU server's pseudo-terminal needs Linux")
}
