//go:build !unix

package serialline

import "go.bug.st/serial"

func open(path string, mode *serial.Mode) (*Line, error) {
	port, err := serial.Open(path, mode)
	if err != nil {
		return nil, err
	}
	return &Line{rw: port, port: port}, nil
}
