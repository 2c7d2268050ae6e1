// Command floor is the least a Go server does for an uncached read, the
// floor under physmcpd's in bench/compare: it answers every request, a line
// on stdin (-stdio) or a POST to /mcp (net/http), with the same small
// JSON-RPC result, and first reads holding register 0 of unit 1 at -modbus
// with a bare goburrow client when the request names a tool ending in
// "_live"; a notification (no "id") gets no answer. It decodes no JSON and speaks no MCP, so what an uncached read
// adds to a cached one here is the device's round trip and what Go's
// runtime, net/http or the pipes, and the kernel add to it.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	gb "github.com/goburrow/modbus"
)

const answer = `{"jsonrpc":"2.0","id":0,"result":{}}` + "\n"

func main() {
	device := flag.String("modbus", "", "Modbus TCP device host:port")
	stdio := flag.Bool("stdio", false, "serve lines on stdin and stdout instead of HTTP")
	flag.Parse()
	if err := run(*device, *stdio); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

func run(device string, stdio bool) error {
	h := gb.NewTCPClientHandler(device)
	h.Timeout, h.SlaveId = time.Second, 1
	defer h.Close()
	c := gb.NewClient(h)
	var mu sync.Mutex // one transaction at a time, as on a bus
	serve := func(request []byte) error {
		if bytes.Contains(request, []byte(`_live"`)) {
			mu.Lock()
			defer mu.Unlock()
			_, err := c.ReadHoldingRegisters(0, 1)
			return err
		}
		return nil
	}
	if stdio {
		in := bufio.NewReader(os.Stdin)
		for {
			line, err := in.ReadSlice('\n')
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if !bytes.Contains(line, []byte(`"id":`)) {
				continue
			}
			if err := serve(line); err != nil {
				return err
			}
			if _, err := io.WriteString(os.Stdout, answer); err != nil {
				return err
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("listening %s\n", ln.Addr())
	return http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil && !bytes.Contains(body, []byte(`"id":`)) {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		if err == nil {
			err = serve(body)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answer)
	}))
}
