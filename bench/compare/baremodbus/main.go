// Command baremodbus is the bare goburrow baseline of bench/compare in a
// process of its own, as physmcpd is: the device it reads lives in the bench
// process, so both pay the same wake-ups across processes. It reads holding
// register 0 of unit 1 at -addr over one connection. For each line N on
// stdin it makes N reads and prints the time they took in nanoseconds.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	gb "github.com/goburrow/modbus"
)

func main() {
	addr := flag.String("addr", "", "Modbus TCP device host:port")
	flag.Parse()
	if err := run(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "baremodbus:", err)
		os.Exit(1)
	}
}

func run(addr string) error {
	h := gb.NewTCPClientHandler(addr)
	h.Timeout, h.SlaveId = time.Second, 1
	defer h.Close()
	c := gb.NewClient(h)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		n, err := strconv.Atoi(strings.TrimSpace(in.Text()))
		if err != nil {
			return fmt.Errorf("want a count, got %q", in.Text())
		}
		start := time.Now()
		for range n {
			if _, err := c.ReadHoldingRegisters(0, 1); err != nil {
				return err
			}
		}
		fmt.Println(time.Since(start).Nanoseconds())
	}
	return in.Err()
}
