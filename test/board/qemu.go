// Package board is physmcpd's board test: an i.MX6 sabrelite under
// qemu-system-arm with Debian's armmp kernel, a TMP105 on the first I2C
// adapter and the first GPIO bank driven and watched from outside. physmcpd
// (GOARM=7) serves real drivers in the guest; the test talks MCP to it over
// the serial console and changes the hardware through QMP and qtest.
package board

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// dial connects to one of qemu's unix sockets, which appear shortly after start.
func dial(path string) (net.Conn, error) {
	var err error
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		var c net.Conn
		if c, err = net.Dial("unix", path); err == nil {
			return c, nil
		}
	}
	return nil, err
}

// qmp is a QEMU Machine Protocol client (one command at a time).
type qmp struct {
	conn net.Conn
	r    *bufio.Reader
	mu   sync.Mutex
}

func dialQMP(path string) (*qmp, error) {
	c, err := dial(path)
	if err != nil {
		return nil, fmt.Errorf("qmp: %w", err)
	}
	q := &qmp{conn: c, r: bufio.NewReader(c)}
	if _, err := q.r.ReadString('\n'); err != nil { // greeting
		return nil, fmt.Errorf("qmp greeting: %w", err)
	}
	if err := q.do("qmp_capabilities", nil); err != nil {
		return nil, err
	}
	return q, nil
}

// do runs one command; events that arrive in between are skipped.
func (q *qmp) do(cmd string, args map[string]any) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	msg := map[string]any{"execute": cmd}
	if args != nil {
		msg["arguments"] = args
	}
	req, _ := json.Marshal(msg)
	q.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := q.conn.Write(append(req, '\n')); err != nil {
		return fmt.Errorf("qmp %s: %w", cmd, err)
	}
	for {
		line, err := q.r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("qmp %s: %w", cmd, err)
		}
		var resp struct {
			Event  string          `json:"event"`
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Desc string `json:"desc"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &resp); err != nil {
			return fmt.Errorf("qmp %s: %q: %w", cmd, line, err)
		}
		switch {
		case resp.Event != "":
			continue
		case resp.Error != nil:
			return fmt.Errorf("qmp %s: %s", cmd, resp.Error.Desc)
		}
		return nil
	}
}

func (q *qmp) close() { q.conn.Close() }

// qtest drives GPIO lines of one device: it intercepts the device's outputs
// (qtest allows one intercepted device per run) and sets its inputs.
type qtest struct {
	conn net.Conn
	dev  string

	mu      sync.Mutex
	changed *sync.Cond
	levels  map[int][]int // output line -> every level the guest drove it to, in order
	fails   []string
}

func dialQtest(path, dev string) (*qtest, error) {
	c, err := dial(path)
	if err != nil {
		return nil, fmt.Errorf("qtest: %w", err)
	}
	q := &qtest{conn: c, dev: dev, levels: map[int][]int{}}
	q.changed = sync.NewCond(&q.mu)
	go q.read()
	if err := q.send("irq_intercept_out " + dev); err != nil {
		return nil, err
	}
	return q, nil
}

func (q *qtest) send(cmd string) error {
	_, err := io.WriteString(q.conn, cmd+"\n")
	return err
}

// read records "IRQ raise|lower N" and failures until the socket closes.
// qemu's i.MX GPIO calls the output IRQ on every write of the data or
// direction register that reaches an output line, and qtest reports each
// change of level: a glitch of any length shows up as two entries.
func (q *qtest) read() {
	s := bufio.NewScanner(q.conn)
	for s.Scan() {
		f := strings.Fields(s.Text())
		q.mu.Lock()
		switch {
		case len(f) == 3 && f[0] == "IRQ":
			var line int
			fmt.Sscan(f[2], &line)
			q.levels[line] = append(q.levels[line], map[string]int{"raise": 1, "lower": 0}[f[1]])
		case len(f) > 0 && f[0] == "FAIL":
			q.fails = append(q.fails, s.Text())
		}
		q.changed.Broadcast()
		q.mu.Unlock()
	}
	q.mu.Lock()
	q.fails = append(q.fails, "qtest socket closed")
	q.changed.Broadcast()
	q.mu.Unlock()
}

// drive sets input line n of the device to level (0 or 1).
func (q *qtest) drive(n, level int) error {
	return q.send(fmt.Sprintf("set_irq_in %s unnamed-gpio-in %d %d", q.dev, n, level))
}

// waitOutput waits until the guest drives output line n to level; it
// returns the last level seen (-1: never driven) and whether it matched.
func (q *qtest) waitOutput(n, level int, timeout time.Duration) (int, bool) {
	timer := time.AfterFunc(timeout, func() { q.mu.Lock(); q.changed.Broadcast(); q.mu.Unlock() })
	defer timer.Stop()
	end := time.Now().Add(timeout)
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		last := -1
		if l := q.levels[n]; len(l) > 0 {
			last = l[len(l)-1]
		}
		if last == level {
			return last, true
		}
		if time.Now().After(end) {
			return last, false
		}
		q.changed.Wait()
	}
}

// history is every level the guest drove line n to, in order (empty while
// it is at its reset level, low: qtest reports changes only).
func (q *qtest) history(n int) []int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]int(nil), q.levels[n]...)
}

func (q *qtest) failures() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.fails...)
}

func (q *qtest) close() { q.conn.Close() }

// console splits the guest's serial console: boot output up to the line
// "BOARD exec ..." goes to the log, everything after it is MCP.
type console struct {
	mcp     *io.PipeReader
	execed  chan struct{}
	bootLog strings.Builder
	mu      sync.Mutex
}

func newConsole(from io.Reader) *console {
	pr, pw := io.Pipe()
	c := &console{mcp: pr, execed: make(chan struct{})}
	go func() {
		r := bufio.NewReader(from)
		for {
			line, err := r.ReadString('\n')
			c.mu.Lock()
			c.bootLog.WriteString(line)
			c.mu.Unlock()
			if strings.HasPrefix(strings.TrimLeft(line, "\r"), "BOARD exec ") {
				close(c.execed)
				_, err = io.Copy(pw, r)
				pw.CloseWithError(err)
				return
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
		}
	}()
	return c
}

func (c *console) log() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bootLog.String()
}
