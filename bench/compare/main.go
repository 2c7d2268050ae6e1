// Command compare measures physmcpd against its baselines side by side, as
// issue 12 asks: physmcpd and a bare mcp-go server (bench/compare/baremcp,
// with and without schema validation) built from this tree and run as
// processes, and a bare goburrow client reading the same register from the
// same loopback Modbus TCP device (internal/modbusfault), in this process and
// in one of its own (bench/compare/baremodbus), and for uncached reads the
// least a Go server does for one (bench/compare/floor). Alternatives run
// in interleaved rounds, in an order that rotates, and each ratio is the
// median of its per-round ratios: the machine is shared and its load drifts.
// It prints the table of docs/performance.md. bench/compare.sh runs it; the
// README's test command does not.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gb "github.com/goburrow/modbus"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/drivers/modbus"
	"github.com/physmcp/physmcpd/internal/modbusfault"
	"github.com/physmcp/physmcpd/manifest"
)

func main() {
	rounds := flag.Int("rounds", 21, "interleaved rounds per ratio")
	calls := flag.Int("do-calls", 30000, "do_* calls before the resident memory is read")
	only := flag.String("only", "", "run only these measures (comma-separated: cached,uncached,bus,list,cando,durable,memory)")
	base := flag.String("base", "", "another physmcpd binary (another revision's build) to run in the uncached, list, cando and durable rounds too")
	flag.Parse()
	b := &bench{rounds: *rounds, doCalls: *calls, only: *only, base: *base}
	err := b.run()
	b.stopAll()
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

type bench struct {
	rounds, doCalls int
	only            string
	base            string // a physmcpd to compare uncached reads, tools/list, can_do and durable do_* with
	dir             string
	physmcpd, bare  string // binaries
	bareModbus      string
	floor           string
	procs           []*exec.Cmd
	rows            []row
}

// row is one line of the table.
type row struct{ measure, result, goal, rounds string }

func (b *bench) add(measure, result, goal string, rounds int) {
	r := row{measure, result, goal, "–"}
	if rounds > 0 {
		r.rounds = strconv.Itoa(rounds)
	}
	b.rows = append(b.rows, r)
	fmt.Fprintf(os.Stderr, "  %s: %s\n", measure, result)
}

func (b *bench) run() error {
	var err error
	if b.dir, err = os.MkdirTemp("", "physmcpd-compare"); err != nil {
		return err
	}
	defer os.RemoveAll(b.dir)
	b.physmcpd, b.bare, b.bareModbus, b.floor = filepath.Join(b.dir, "physmcpd"), filepath.Join(b.dir, "baremcp"), filepath.Join(b.dir, "baremodbus"), filepath.Join(b.dir, "floor")
	for bin, pkg := range map[string]string{b.physmcpd: "./cmd/physmcpd", b.bare: "./bench/compare/baremcp", b.bareModbus: "./bench/compare/baremodbus", b.floor: "./bench/compare/floor"} {
		// as build.sh builds releases: static (no cgo, so no libc mapped in) and -trimpath
		build := exec.Command("go", "build", "-trimpath", "-o", bin, pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	dev, err := modbusfault.ListenTCP()
	if err != nil {
		return err
	}
	defer dev.Close()
	dev.Set(modbusfault.HoldingRegisters, 0, 123)
	b.write("read.yml", readManifest(dev.Addr()))
	b.write("zones.yml", zonesManifest(100))
	b.write("zones16.yml", zonesManifest(16))
	b.write("policy.yml", policyYAML)

	host, _ := os.Hostname()
	fmt.Printf("physmcpd bench/compare on %s: %s, %d CPUs, %s/%s, %s, %s\n\n", host, cpuModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), time.Now().UTC().Format(time.RFC3339))
	steps := []struct {
		name string
		run  func(*modbusfault.TCP) error
	}{{"cached", b.cachedReads}, {"uncached", b.uncachedReads}, {"bus", b.busInProcess}, {"list", b.toolsList}, {"cando", b.canDo}, {"durable", b.durable}, {"memory", b.memory}}
	for _, step := range steps {
		if b.only != "" && !slices.Contains(strings.Split(b.only, ","), step.name) {
			continue
		}
		if err := step.run(dev); err != nil {
			return err
		}
		b.stopAll()
	}
	fmt.Println("| measure | result | goal | rounds |")
	fmt.Println("|---|---|---|---|")
	for _, r := range b.rows {
		fmt.Printf("| %s | %s | %s | %s |\n", r.measure, r.result, r.goal, r.rounds)
	}
	return nil
}

// --- the devices ---------------------------------------------------------

const policyYAML = "physmcp_policy_version: \"0.1\"\nidentity:\n  local_role: operator\n"

// readManifest is one holding register of the loopback device, read through
// a cached capability and an uncached one.
func readManifest(addr string) string {
	return fmt.Sprintf(`physmcp_version: "0.1"
device: {id: bench_rig, type: test_rig}
buses:
  plc: {type: modbus-tcp, address: %q}
capabilities:
  - {name: level, kind: read, description: Tank level., data_type: int, unit: cm, semantic_tags: [tank, level],
     binding: {bus: plc, unit: 1, table: holding, address: 0, data_type: uint16}, cache_ttl_ms: 3600000}
  - {name: level_live, kind: read, description: Tank level from the device every time., data_type: int, unit: cm, semantic_tags: [tank, level],
     binding: {bus: plc, unit: 1, table: holding, address: 0, data_type: uint16}, cacheable: false}
`, addr)
}

// zonesManifest is 2n simulated capabilities: n zone setpoints (do_*, no
// cooldown or rate limit) and n zone temperatures.
func zonesManifest(n int) string {
	var s strings.Builder
	s.WriteString(`physmcp_version: "0.1"
device: {id: zones, type: test_rig, location: {zone: lab}}
buses:
  mb: {type: modbus-tcp, address: 127.0.0.1:1502, simulated: true, simulation: {latency_ms: 0, seed: 1}}
capabilities:
`)
	for i := range n {
		fmt.Fprintf(&s, `  - {name: setpoint_%03d, kind: do, description: Zone %d setpoint., data_type: float, unit: "°C", range: {min: 0, max: 100},
     binding: {bus: mb, unit: 1, table: holding, address: %d, data_type: uint16, scale: 0.1},
     semantic_tags: [heating, setpoint, zone_%03d], side_effects: ["zone %d heats"]}
  - {name: temperature_%03d, kind: read, description: Zone %d air temperature., data_type: float, unit: "°C", range: {min: -40, max: 125},
     binding: {bus: mb, unit: 1, table: input, address: %d, data_type: int16, scale: 0.1}, cache_ttl_ms: 3600000,
     semantic_tags: [temperature, air, zone_%03d]}
`, i, i, i, i, i, i, i, i, i)
	}
	return s.String()
}

func (b *bench) write(name, text string) string {
	path := filepath.Join(b.dir, name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		panic(err) // the temporary directory was just made
	}
	return path
}

// --- processes -----------------------------------------------------------

// serveHTTP starts physmcpd serving the manifest NAME.yml (see run) over
// HTTP and returns its URL.
func (b *bench) serveHTTP(manifest string, extra ...string) (string, *exec.Cmd, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	args := append([]string{"serve", "--manifest", filepath.Join(b.dir, manifest+".yml"), "--policy", filepath.Join(b.dir, "policy.yml"),
		"--http", addr, "--log-level", "error"}, extra...)
	cmd := exec.Command(b.physmcpd, args...)
	cmd.Stderr = os.Stderr
	if err := b.start(cmd); err != nil {
		return "", nil, err
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr + "/mcp", cmd, nil
		}
	}
	return "", nil, fmt.Errorf("physmcpd %v did not listen", args)
}

// serveBase is serveHTTP with the -base build.
func (b *bench) serveBase(manifest string, extra ...string) (string, *exec.Cmd, error) {
	tree := b.physmcpd
	b.physmcpd = b.base
	defer func() { b.physmcpd = tree }()
	return b.serveHTTP(manifest, extra...)
}

// serveBare starts baremcp with tool (and extra flags) and returns its URL
// and process.
func (b *bench) serveBare(toolFile string, validate bool, extra ...string) (string, *exec.Cmd, error) {
	return b.serveListening(b.bare, append([]string{"-tool", toolFile, "-validate=" + strconv.FormatBool(validate)}, extra...)...)
}

// serveListening starts bin (baremcp or floor), which says where it listens
// on its first line, and returns its URL and process.
func (b *bench) serveListening(bin string, args ...string) (string, *exec.Cmd, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := b.start(cmd); err != nil {
		return "", nil, err
	}
	line := make([]byte, 128)
	n, _ := out.Read(line)
	addr, ok := strings.CutPrefix(strings.TrimSpace(string(line[:n])), "listening ")
	if !ok {
		return "", nil, fmt.Errorf("%s said %q", filepath.Base(bin), line[:n])
	}
	return "http://" + addr + "/mcp", cmd, nil
}

func (b *bench) start(cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	b.procs = append(b.procs, cmd)
	return nil
}

func (b *bench) stopAll() {
	for _, p := range b.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	b.procs = nil
}

// --- clients -------------------------------------------------------------

// pooled keeps connections to every server for all concurrent clients.
var pooled = &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}

// legacyVersion is what clients in use today speak (initialize handshake,
// sessions); both servers serve it the same way.
const legacyVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION

func connectHTTP(url string) (*client.Client, error) {
	tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPBasicClient(pooled))
	if err != nil {
		return nil, err
	}
	return initialize(client.NewClient(tr))
}

// connectStdio starts bin as a stdio server and returns the client and the
// server's process.
func connectStdio(bin string, args ...string) (*client.Client, *exec.Cmd, error) {
	var cmd *exec.Cmd
	tr := transport.NewStdioWithOptions(bin, nil, args, transport.WithCommandFunc(func(ctx context.Context, command string, env, args []string) (*exec.Cmd, error) {
		cmd = exec.CommandContext(ctx, command, args...)
		cmd.Env = append(os.Environ(), env...)
		return cmd, nil
	}))
	c, err := initialize(client.NewClient(tr))
	return c, cmd, err
}

func initialize(c *client.Client) (*client.Client, error) {
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = legacyVersion
	init.Params.ClientInfo = mcp.Implementation{Name: "bench-compare", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		return nil, err
	}
	return c, nil
}

func clients(n int, connect func() (*client.Client, error)) ([]*client.Client, error) {
	out := make([]*client.Client, n)
	for i := range out {
		var err error
		if out[i], err = connect(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func call(c *client.Client, tool string, args map[string]any) (*mcp.CallToolResult, error) {
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := c.CallTool(context.Background(), req)
	if err == nil && res.IsError {
		err = fmt.Errorf("%s: %v", tool, res.Content)
	}
	return res, err
}

// calls runs n calls of tool on each client at once and returns the time per call.
func calls(cs []*client.Client, tool string, n int) func() (float64, error) {
	return func() (float64, error) {
		var wg sync.WaitGroup
		var failed atomic.Pointer[error]
		start := time.Now()
		for _, c := range cs {
			wg.Go(func() {
				for range n {
					if _, err := call(c, tool, nil); err != nil {
						failed.Store(&err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err := failed.Load(); err != nil {
			return 0, *err
		}
		return float64(time.Since(start).Nanoseconds()) / float64(n*len(cs)), nil
	}
}

// --- rounds --------------------------------------------------------------

// rounds runs each arm once per round, in an order that rotates from round
// to round, and returns ns[round][arm].
func rounds(n int, arms ...func() (float64, error)) ([][]float64, error) {
	ns := make([][]float64, n)
	for r := range ns {
		ns[r] = make([]float64, len(arms))
		for k := range arms {
			i := (k + r) % len(arms)
			v, err := arms[i]()
			if err != nil {
				return nil, err
			}
			ns[r][i] = v
		}
	}
	return ns, nil
}

func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	if len(xs) == 0 {
		return 0
	}
	m := len(xs) / 2
	if len(xs)%2 == 0 {
		return (xs[m-1] + xs[m]) / 2
	}
	return xs[m]
}

// medianOf is the median over rounds of f of each round's times.
func medianOf(ns [][]float64, f func(t []float64) float64) float64 {
	var xs []float64
	for _, t := range ns {
		xs = append(xs, f(t))
	}
	return median(xs)
}

func col(i int) func([]float64) float64 { return func(t []float64) float64 { return t[i] } }

func us(ns float64) string { return fmt.Sprintf("%.0f µs", ns/1e3) }

// --- the measures --------------------------------------------------------

// cachedReads: a cached read_* over HTTP against the bare mcp-go server
// answering the same body with the same schemas, with 1 and 16 clients.
// The ratio is physmcpd's calls per second ÷ the baseline's.
func (b *bench) cachedReads(dev *modbusfault.TCP) error {
	url, _, err := b.serveHTTP("read", "--state-dir", filepath.Join(b.dir, "state-read"))
	if err != nil {
		return err
	}
	c, err := connectHTTP(url)
	if err != nil {
		return err
	}
	tool, err := toolFile(b, url, c, "read_level")
	if err != nil {
		return err
	}
	bareOn, _, err := b.serveBare(tool, true)
	if err != nil {
		return err
	}
	bareOff, _, err := b.serveBare(tool, false)
	if err != nil {
		return err
	}
	for _, n := range []int{1, 16} {
		var arms []func() (float64, error)
		for _, u := range []string{url, bareOn, bareOff} {
			cs, err := clients(n, func() (*client.Client, error) { return connectHTTP(u) })
			if err != nil {
				return err
			}
			arm := calls(cs, "read_level", 3200/(n*4)+50)
			if _, err := arm(); err != nil { // warm up
				return err
			}
			arms = append(arms, arm)
		}
		ns, err := rounds(b.rounds, arms...)
		if err != nil {
			return err
		}
		per := fmt.Sprintf("physmcpd %s, bare %s / %s per call", us(medianOf(ns, col(0))), us(medianOf(ns, col(1))), us(medianOf(ns, col(2))))
		b.add(fmt.Sprintf("cached read_* over HTTP ÷ bare mcp-go with validation, %d client(s) (%s)", n, per),
			fmt.Sprintf("%.2f×", medianOf(ns, func(t []float64) float64 { return t[1] / t[0] })), "≥ 1.1×", b.rounds)
		b.add(fmt.Sprintf("cached read_* over HTTP ÷ bare mcp-go with validation off, %d client(s)", n),
			fmt.Sprintf("%.2f×", medianOf(ns, func(t []float64) float64 { return t[2] / t[0] })), "≥ 0.97×", b.rounds)
	}
	return nil
}

// toolFile writes the baseline's tool: physmcpd's definition of name from
// its tools/list, and a body physmcpd answered.
func toolFile(b *bench, url string, c *client.Client, name string) (string, error) {
	post, err := rawSession(url)
	if err != nil {
		return "", err
	}
	list, err := post(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if err != nil {
		return "", err
	}
	var resp struct {
		Result struct {
			Tools []struct {
				Name         string          `json:"name"`
				Description  string          `json:"description"`
				InputSchema  json.RawMessage `json:"inputSchema"`
				OutputSchema json.RawMessage `json:"outputSchema"`
			} `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal(list, &resp); err != nil {
		return "", err
	}
	res, err := call(c, name, nil)
	if err != nil {
		return "", err
	}
	body, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return "", err
	}
	for _, t := range resp.Result.Tools {
		if t.Name == name {
			out, err := json.Marshal(map[string]any{"name": t.Name, "description": t.Description, "inputSchema": t.InputSchema, "outputSchema": t.OutputSchema, "body": json.RawMessage(body)})
			if err != nil {
				return "", err
			}
			return b.write("tool.json", string(out)), nil
		}
	}
	return "", fmt.Errorf("%s is not in physmcpd's tools/list", name)
}

// rawSession opens a legacy session over plain HTTP and returns a function
// that posts one JSON-RPC request in it and returns the answer, read in
// full but not decoded: timing it times the server's answer and its
// transfer, without a client's decoding. The answer is read into the same
// buffer every time and is valid until the next post: reading 347 KB with
// io.ReadAll (growing a new slice from 512 B, and the collector and the
// scavenger freeing and returning it) cost this process 1.1 ms of CPU per
// tools/list at 200 capabilities, four times what physmcpd spends on it.
func rawSession(url string) (func(body string) ([]byte, error), error) {
	session := ""
	var buf bytes.Buffer
	post := func(body string) ([]byte, http.Header, error) {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			return nil, nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", legacyVersion)
		}
		resp, err := pooled.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		buf.Reset()
		_, err = buf.ReadFrom(resp.Body)
		out := buf.Bytes()
		if err == nil && resp.StatusCode/100 != 2 {
			err = fmt.Errorf("%.100s: %s %.200s", body, resp.Status, out)
		}
		return out, resp.Header, err
	}
	_, h, err := post(initializeBody)
	if err != nil {
		return nil, err
	}
	session = h.Get("Mcp-Session-Id")
	if _, _, err := post(initializedBody); err != nil {
		return nil, err
	}
	return func(body string) ([]byte, error) {
		out, _, err := post(body)
		return out, answered(body, out, err)
	}, nil
}

const (
	initializeBody  = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + legacyVersion + `","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`
	initializedBody = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
)

// answered is err, or an error when out, the answer to body, is not a
// result: a JSON-RPC answer names its result or error before its payload.
func answered(body string, out []byte, err error) error {
	if err == nil && !bytes.Contains(out[:min(len(out), 128)], []byte(`"result":`)) {
		err = fmt.Errorf("%.100s: %.200s", body, out)
	}
	return err
}

// rawStdio is rawSession over stdio: it starts bin with args, initializes
// as rawSession does and returns a function that writes a request as a
// line and reads its answer (skipping notifications), and the process.
func (b *bench) rawStdio(bin string, args ...string) (func(body string) ([]byte, error), int, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, 0, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, 0, err
	}
	if err := b.start(cmd); err != nil {
		return nil, 0, err
	}
	out := bufio.NewReaderSize(stdout, 64<<10)
	send := func(body string) error {
		_, err := io.WriteString(in, body+"\n")
		return err
	}
	post := func(body string) ([]byte, error) {
		if err := send(body); err != nil {
			return nil, err
		}
		for {
			line, err := out.ReadSlice('\n')
			if err != nil || !bytes.HasPrefix(line, []byte(`{"jsonrpc":"2.0","method":`)) {
				return line, answered(body, line, err)
			}
		}
	}
	if _, err := post(initializeBody); err != nil {
		return nil, 0, err
	}
	if err := send(initializedBody); err != nil {
		return nil, 0, err
	}
	return post, cmd.Process.Pid, nil
}

// timedPosts posts body(i) n times and returns the time per request, and the size of the last answer.
func timedPosts(post func(string) ([]byte, error), n int, body func(i int) string, size *int) func() (float64, error) {
	i := 0
	return func() (float64, error) {
		start := time.Now()
		for range n {
			i++
			out, err := post(body(i))
			if err != nil {
				return 0, err
			}
			*size = len(out)
		}
		return float64(time.Since(start).Nanoseconds()) / float64(n), nil
	}
}

// uncachedReads: what an uncached read adds to a cached one, over HTTP and
// over stdio, against a bare goburrow read of the same register. The ratio's
// goburrow runs in a process of its own (bench/compare/baremodbus), as
// physmcpd does: the device is in this process, which sleeps in its HTTP or
// stdio client while physmcpd reads and must be woken to answer, as it must
// for a client in another process; a goburrow loop in this process finds it
// awake. The in-process loop is shown beside it. With -base, the other build
// reads in the same rounds and its ratios are shown beside the tree's.
// The same reads by clients that decode nothing (rawSession, rawStdio) are
// shown too, of physmcpd and of bench/compare/floor, the least a Go server
// does for a device read: what is left above the floor is physmcpd's, what
// the floor adds over goburrow's process is Go's and the kernel's.
func (b *bench) uncachedReads(dev *modbusfault.TCP) error {
	const n = 200
	// The servers, in the arms' order: physmcpd (0) and baremcp (1) with
	// mcp-go's clients, physmcpd (2) and the floor (3) with clients that
	// decode nothing, then the -base build (4).
	servers := make([]*uncachedArms, 0, 5)
	for _, start := range []func() (*uncachedArms, error){
		func() (*uncachedArms, error) { return b.physmcpdArms(b.physmcpd, "read", n) },
		func() (*uncachedArms, error) { return b.bareArms(dev.Addr(), n) },
		func() (*uncachedArms, error) { return b.rawPhysmcpdArms(n) },
		func() (*uncachedArms, error) { return b.floorArms(dev.Addr(), n) },
		func() (*uncachedArms, error) {
			if b.base == "" {
				return nil, nil
			}
			return b.physmcpdArms(b.base, "read-base", n)
		},
	} {
		s, err := start()
		if err != nil {
			return err
		}
		if s != nil {
			defer s.close()
			servers = append(servers, s)
		}
	}
	h := gb.NewTCPClientHandler(dev.Addr())
	h.Timeout, h.SlaveId = time.Second, 1
	defer h.Close()
	bare := gb.NewClient(h)
	goburrow := func() (float64, error) {
		start := time.Now()
		for range n {
			if _, err := bare.ReadHoldingRegisters(0, 1); err != nil {
				return 0, err
			}
		}
		return float64(time.Since(start).Nanoseconds()) / n, nil
	}
	apart, apartPid, err := b.processReads(dev.Addr(), n)
	if err != nil {
		return err
	}
	// Arms: 0 goburrow's process, 1 goburrow here, then each server's four
	// (HTTP uncached, HTTP cached, stdio uncached, stdio cached) from 2+4s.
	var apartCPU []usage
	arms := []func() (float64, error){withCPU(apartPid, n, apart, &apartCPU), goburrow}
	for _, s := range servers {
		arms = append(arms, s.arms...)
	}
	for _, arm := range arms {
		if _, err := arm(); err != nil {
			return err
		}
	}
	apartCPU = apartCPU[:0] // not the warm-up
	for _, s := range servers {
		for i := range s.cpu {
			s.cpu[i] = s.cpu[i][:0]
		}
	}
	ns, err := rounds(b.rounds, arms...)
	if err != nil {
		return err
	}
	uncached := func(s, t int) int { return 2 + 4*s + 2*t }
	// ratio is (uncached − cached) ÷ goburrow's process of server s over transport t.
	ratio := func(s, t int) float64 {
		live := uncached(s, t)
		return medianOf(ns, func(r []float64) float64 { return (r[live] - r[live+1]) / r[0] })
	}
	times := func(s, t int) string {
		return fmt.Sprintf("uncached %s, cached %s", us(medianOf(ns, col(uncached(s, t)))), us(medianOf(ns, col(uncached(s, t)+1))))
	}
	// cpu is what server s's uncached read over transport t adds to a cached one.
	cpu := func(s, t int) string {
		u := servers[s].cpu
		return fmt.Sprintf("%s, %.1f thread runs", us(medianUse(u[2*t], cpuOf)-medianUse(u[2*t+1], cpuOf)),
			medianUse(u[2*t], runsOf)-medianUse(u[2*t+1], runsOf))
	}
	cachedCPU := func(s, t int) string {
		u := servers[s].cpu[2*t+1]
		return fmt.Sprintf("%s, %.1f thread runs", us(medianUse(u, cpuOf)), medianUse(u, runsOf))
	}
	for t, transport := range []string{"HTTP", "stdio"} {
		same := fmt.Sprintf("; in the same rounds, a bare mcp-go server reading with goburrow in its handler: %.2f×, CPU uncached − cached %s", ratio(1, t), cpu(1, t))
		same += fmt.Sprintf("; with clients that decode nothing: physmcpd %.2f× (%s; CPU uncached − cached %s), the floor, a Go server that decodes nothing and reads with goburrow (bench/compare/floor), %.2f× (%s; CPU uncached − cached %s)",
			ratio(2, t), times(2, t), cpu(2, t), ratio(3, t), times(3, t), cpu(3, t))
		if b.base != "" {
			same += fmt.Sprintf("; %s: %.2f× (%s), CPU %s, a cached read %s against physmcpd's %s", filepath.Base(b.base), ratio(4, t),
				times(4, t), cpu(4, t), cachedCPU(4, t), cachedCPU(0, t))
		}
		live, cached := uncached(0, t), uncached(0, t)+1
		b.add(fmt.Sprintf("uncached Modbus TCP read over %s: (uncached − cached) ÷ goburrow in a process of its own (goburrow %s, %s; "+
			"÷ goburrow in the device's process, %s: %.2f×; CPU per read: physmcpd's uncached − cached %s, goburrow's process %s%s)", transport,
			us(medianOf(ns, col(0))), times(0, t), us(medianOf(ns, col(1))),
			medianOf(ns, func(r []float64) float64 { return (r[live] - r[cached]) / r[1] }),
			cpu(0, t), fmt.Sprintf("%s, %.1f thread runs", us(medianUse(apartCPU, cpuOf)), medianUse(apartCPU, runsOf)), same),
			fmt.Sprintf("%.2f×", ratio(0, t)), "≤ 1.1×", b.rounds)
	}
	return nil
}

// uncachedArms is one server answering an uncached and a cached read over
// HTTP and over stdio: its four arms (HTTP uncached, HTTP cached, stdio
// uncached, stdio cached) and the server's CPU time per read in each.
type uncachedArms struct {
	arms  []func() (float64, error)
	cpu   [4][]usage
	close func() // ends a stdio server the bench does not stop itself
}

// physmcpdArms starts bin over HTTP and over stdio, each with a state
// directory named after state, with mcp-go's client.
func (b *bench) physmcpdArms(bin, state string, n int) (*uncachedArms, error) {
	tree := b.physmcpd
	b.physmcpd = bin
	url, httpCmd, err := b.serveHTTP("read", "--state-dir", filepath.Join(b.dir, "state-"+state))
	b.physmcpd = tree
	if err != nil {
		return nil, err
	}
	httpC, err := connectHTTP(url)
	if err != nil {
		return nil, err
	}
	stdioC, stdioCmd, err := connectStdio(bin, b.stdioArgs(state)...)
	if err != nil {
		return nil, err
	}
	return clientArms(httpC, httpCmd.Process.Pid, stdioC, stdioCmd.Process.Pid, "read_level", n), nil
}

func (b *bench) stdioArgs(state string) []string {
	return []string{"serve", "--manifest", filepath.Join(b.dir, "read.yml"), "--policy", filepath.Join(b.dir, "policy.yml"),
		"--stdio", "--state-dir", filepath.Join(b.dir, "state-"+state+"-stdio"), "--log-level", "error"}
}

// bareArms starts baremcp (validation off) over HTTP and over stdio with
// physmcpd's read_level, and read_level_live reading the device with goburrow.
func (b *bench) bareArms(device string, n int) (*uncachedArms, error) {
	url, _, err := b.serveHTTP("read", "--state-dir", filepath.Join(b.dir, "state-read-tool"))
	if err != nil {
		return nil, err
	}
	c, err := connectHTTP(url)
	if err != nil {
		return nil, err
	}
	tool, err := toolFile(b, url, c, "read_level")
	if err != nil {
		return nil, err
	}
	url, httpCmd, err := b.serveBare(tool, false, "-modbus", device)
	if err != nil {
		return nil, err
	}
	httpC, err := connectHTTP(url)
	if err != nil {
		return nil, err
	}
	stdioC, stdioCmd, err := connectStdio(b.bare, "-tool", tool, "-modbus", device, "-stdio")
	if err != nil {
		return nil, err
	}
	return clientArms(httpC, httpCmd.Process.Pid, stdioC, stdioCmd.Process.Pid, "read_level", n), nil
}

// rawPhysmcpdArms is physmcpdArms (the tree's build) with clients that
// decode nothing: rawSession and rawStdio.
func (b *bench) rawPhysmcpdArms(n int) (*uncachedArms, error) {
	url, httpCmd, err := b.serveHTTP("read", "--state-dir", filepath.Join(b.dir, "state-raw"))
	if err != nil {
		return nil, err
	}
	return b.rawArms(url, httpCmd.Process.Pid, n, b.physmcpd, b.stdioArgs("raw")...)
}

// floorArms starts bench/compare/floor over HTTP and over stdio on device,
// with clients that decode nothing.
func (b *bench) floorArms(device string, n int) (*uncachedArms, error) {
	url, httpCmd, err := b.serveListening(b.floor, "-modbus", device)
	if err != nil {
		return nil, err
	}
	return b.rawArms(url, httpCmd.Process.Pid, n, b.floor, "-modbus", device, "-stdio")
}

// rawArms is the four arms over a raw session to url (the server httpPid)
// and rawStdio to stdioBin started with stdioArgs.
func (b *bench) rawArms(url string, httpPid, n int, stdioBin string, stdioArgs ...string) (*uncachedArms, error) {
	httpPost, err := rawSession(url)
	if err != nil {
		return nil, err
	}
	stdioPost, stdioPid, err := b.rawStdio(stdioBin, stdioArgs...)
	if err != nil {
		return nil, err
	}
	var size int
	return newUncachedArms([2]int{httpPid, stdioPid}, "read_level", n, func(transport int, tool string) func() (float64, error) {
		return timedPosts([]func(string) ([]byte, error){httpPost, stdioPost}[transport], n, func(i int) string {
			return `{"jsonrpc":"2.0","id":` + strconv.Itoa(i+1) + `,"method":"tools/call","params":{"name":"` + tool + `","arguments":{}}}`
		}, &size)
	}, func() {}), nil
}

// clientArms is the four arms over mcp-go clients.
func clientArms(httpC *client.Client, httpPid int, stdioC *client.Client, stdioPid int, tool string, n int) *uncachedArms {
	return newUncachedArms([2]int{httpPid, stdioPid}, tool, n, func(transport int, tool string) func() (float64, error) {
		return calls([]*client.Client{[]*client.Client{httpC, stdioC}[transport]}, tool, n)
	}, func() { _ = stdioC.Close() })
}

// newUncachedArms makes the four arms of the servers pids (HTTP, stdio)
// from arm(transport, tool): tool_live and tool over each transport.
func newUncachedArms(pids [2]int, tool string, n int, arm func(transport int, tool string) func() (float64, error), close func()) *uncachedArms {
	u := &uncachedArms{close: close}
	for i := range u.cpu {
		transport, name := i/2, tool
		if i%2 == 0 {
			name += "_live"
		}
		u.arms = append(u.arms, withCPU(pids[transport], n, arm(transport, name), &u.cpu[i]))
	}
	return u
}

// usage is what a process spent per call in one run of an arm: CPU time
// (ns) and the times its threads were switched onto a CPU, each of which is a
// thread waking (or being preempted and resumed).
type usage struct{ cpu, runs float64 }

// withCPU wraps arm, which makes n calls to the process pid, and appends
// pid's usage per call in each run to out.
func withCPU(pid, n int, arm func() (float64, error), out *[]usage) func() (float64, error) {
	return func() (float64, error) {
		before, err := cpuTime(pid)
		if err != nil {
			return 0, err
		}
		v, err := arm()
		if err != nil {
			return 0, err
		}
		after, err := cpuTime(pid)
		*out = append(*out, usage{float64(after.cpu-before.cpu) / float64(n), float64(after.runs-before.runs) / float64(n)})
		return v, err
	}
}

// medianUse is the median of one field of a run's usage.
func medianUse(use []usage, f func(usage) float64) float64 {
	xs := make([]float64, len(use))
	for i, u := range use {
		xs[i] = f(u)
	}
	return median(xs)
}

func cpuOf(u usage) float64  { return u.cpu }
func runsOf(u usage) float64 { return u.runs }

// cpuTime is the time pid's threads have run on a CPU and how many times
// they were put on one, from the first and third fields of each thread's
// /proc schedstat (nanoseconds, timeslices).
func cpuTime(pid int) (struct{ cpu, runs int64 }, error) {
	var total struct{ cpu, runs int64 }
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(stats) == 0 {
		return total, fmt.Errorf("no schedstat for %d: %v", pid, err)
	}
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue // a thread that ended
		}
		f := strings.Fields(string(data))
		if len(f) < 3 {
			return total, fmt.Errorf("%s: %q", path, data)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return total, fmt.Errorf("%s: %w", path, err)
		}
		runs, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return total, fmt.Errorf("%s: %w", path, err)
		}
		total.cpu += ns
		total.runs += runs
	}
	return total, nil
}

// processReads starts bench/compare/baremodbus on addr and returns an arm
// that has it make n reads and returns the time per read, and its pid.
func (b *bench) processReads(addr string, n int) (func() (float64, error), int, error) {
	cmd := exec.Command(b.bareModbus, "-addr", addr)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, 0, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, 0, err
	}
	if err := b.start(cmd); err != nil {
		return nil, 0, err
	}
	lines := bufio.NewScanner(out)
	return func() (float64, error) {
		if _, err := fmt.Fprintln(in, n); err != nil {
			return 0, err
		}
		if !lines.Scan() {
			return 0, fmt.Errorf("baremodbus ended: %v", lines.Err())
		}
		took, err := strconv.ParseFloat(lines.Text(), 64)
		return took / float64(n), err
	}, cmd.Process.Pid, nil
}

// busInProcess: physmcpd's Modbus bus called in this process against a bare
// goburrow client, 8 holding registers each.
func (b *bench) busInProcess(dev *modbusfault.TCP) error {
	m, diags := manifest.Load(filepath.Join(b.dir, "read.yml"))
	if m == nil {
		return fmt.Errorf("%s", diags)
	}
	ctx := context.Background()
	bus, err := modbus.OpenTCP(ctx, m, m.Buses["plc"])
	if err != nil {
		return err
	}
	defer bus.Close()
	mb := bus.(interface {
		ReadRegisters(context.Context, uint8, manifest.ModbusTable, uint16, uint16) ([]uint16, error)
	})
	h := gb.NewTCPClientHandler(dev.Addr())
	h.Timeout, h.SlaveId = time.Second, 1
	defer h.Close()
	bare := gb.NewClient(h)
	const n = 500
	timed := func(read func() error) func() (float64, error) {
		return func() (float64, error) {
			start := time.Now()
			for range n {
				if err := read(); err != nil {
					return 0, err
				}
			}
			return float64(time.Since(start).Nanoseconds()) / n, nil
		}
	}
	arms := []func() (float64, error){
		timed(func() error { _, err := bare.ReadHoldingRegisters(0, 8); return err }),
		timed(func() error { _, err := mb.ReadRegisters(ctx, 1, manifest.TableHolding, 0, 8); return err }),
	}
	for _, arm := range arms {
		if _, err := arm(); err != nil {
			return err
		}
	}
	ns, err := rounds(3*b.rounds, arms...)
	if err != nil {
		return err
	}
	b.add(fmt.Sprintf("physmcpd's Modbus bus in process ÷ bare goburrow (goburrow %s, bus %s)", us(medianOf(ns, col(0))), us(medianOf(ns, col(1)))),
		fmt.Sprintf("%.3f×", medianOf(ns, func(t []float64) float64 { return t[1] / t[0] })), "≤ 1.03×", 3*b.rounds)
	return nil
}

// toolsList: tools/list at 200 capabilities over plain HTTP, as answered
// from bytes, and as mcp-go answers it (each request a new shape: its own
// progress token), interleaved; with -base, the base build's from bytes too.
func (b *bench) toolsList(*modbusfault.TCP) error {
	url, _, err := b.serveHTTP("zones", "--simulate")
	if err != nil {
		return err
	}
	post, err := rawSession(url)
	if err != nil {
		return err
	}
	size, baseSize := 0, 0
	list := func(i int) string { return `{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"tools/list"}` }
	fresh := func(i int) string {
		return `{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"tools/list","params":{"_meta":{"progressToken":"bench-` + strconv.Itoa(i) + `"}}}`
	}
	arms := []func() (float64, error){timedPosts(post, 10, list, &size), timedPosts(post, 10, fresh, &size)}
	if b.base != "" {
		basePost, err := b.baseSession("zones")
		if err != nil {
			return err
		}
		arms = append(arms, timedPosts(basePost, 10, list, &baseSize))
	}
	for _, arm := range arms {
		for range 4 { // past the shapes kept per endpoint: every fresh shape goes to mcp-go
			if _, err := arm(); err != nil {
				return err
			}
		}
	}
	ns, err := rounds(b.rounds, arms...)
	if err != nil {
		return err
	}
	vsBase := ""
	if b.base != "" {
		vsBase = fmt.Sprintf("; %s: %.2f ms, %d KB, %.2f× as long", filepath.Base(b.base), medianOf(ns, col(2))/1e6, baseSize/1000,
			medianOf(ns, func(t []float64) float64 { return t[2] / t[0] }))
	}
	b.add(fmt.Sprintf("tools/list at 200 capabilities over HTTP, median of per-round means (%d KB; as mcp-go answers it: %.2f ms, %.1f× as long%s)",
		size/1000, medianOf(ns, col(1))/1e6, medianOf(ns, func(t []float64) float64 { return t[1] / t[0] }), vsBase),
		fmt.Sprintf("%.2f ms", medianOf(ns, col(0))/1e6), "≤ 1.5 ms", b.rounds)
	return nil
}

// canDo: can_do at 200 capabilities over plain HTTP (an intent naming one
// zone's setpoint, which every setpoint matches in part), the cache warm;
// with -base, interleaved with the base build's.
func (b *bench) canDo(*modbusfault.TCP) error {
	url, _, err := b.serveHTTP("zones", "--simulate")
	if err != nil {
		return err
	}
	post, err := rawSession(url)
	if err != nil {
		return err
	}
	posts := []func(string) ([]byte, error){post}
	if b.base != "" {
		basePost, err := b.baseSession("zones")
		if err != nil {
			return err
		}
		posts = append(posts, basePost)
	}
	sizes := make([]int, len(posts))
	var arms []func() (float64, error)
	for i, p := range posts {
		for j := range 100 {
			if _, err := p(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"read_temperature_%03d"}}`, j+2, j)); err != nil {
				return err
			}
		}
		arm := timedPosts(p, 20, func(i int) string {
			return `{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"tools/call","params":{"name":"can_do","arguments":{"intent":` +
				`{"semantic_tags":["zone_042","setpoint"],"action":"set","target":"setpoint_042","value":21.5,"location":"lab"}}}}`
		}, &sizes[i])
		if _, err := arm(); err != nil {
			return err
		}
		arms = append(arms, arm)
	}
	ns, err := rounds(b.rounds, arms...)
	if err != nil {
		return err
	}
	vsBase := ""
	if b.base != "" {
		vsBase = fmt.Sprintf("; %s: %.2f ms, %d KB, %.2f× as long", filepath.Base(b.base), medianOf(ns, col(1))/1e6, sizes[1]/1000,
			medianOf(ns, func(t []float64) float64 { return t[1] / t[0] }))
	}
	b.add(fmt.Sprintf("can_do at 200 capabilities over HTTP, median of per-round means (%d KB answer%s)", sizes[0]/1000, vsBase),
		fmt.Sprintf("%.2f ms", medianOf(ns, col(0))/1e6), "≤ 0.5 ms", b.rounds)
	return nil
}

// baseSession starts the -base build on manifest NAME.yml (simulated) and
// opens a raw session to it.
func (b *bench) baseSession(manifest string) (func(string) ([]byte, error), error) {
	url, _, err := b.serveBase(manifest, "--simulate")
	if err != nil {
		return nil, err
	}
	return rawSession(url)
}

// durable: do_* with --state-dir, 16 clients each on its own setpoint of
// a 32-capability device, in interleaved rounds with the same calls to a
// server without a state directory: the difference is what durability
// costs, whatever the machine's load does to both.
func (b *bench) durable(*modbusfault.TCP) error {
	url, cmd, err := b.serveHTTP("zones16", "--simulate", "--state-dir", filepath.Join(b.dir, "state-durable"))
	if err != nil {
		return err
	}
	memURL, memCmd, err := b.serveHTTP("zones16", "--simulate")
	if err != nil {
		return err
	}
	urls, pids := []string{url, memURL}, []int{cmd.Process.Pid, memCmd.Process.Pid}
	if b.base != "" {
		baseURL, baseCmd, err := b.serveBase("zones16", "--simulate", "--state-dir", filepath.Join(b.dir, "state-durable-base"))
		if err != nil {
			return err
		}
		urls, pids = append(urls, baseURL), append(pids, baseCmd.Process.Pid)
	}
	const perClient = max(100/7, 10)
	var arms []func() (float64, error)
	calls := make([]int, len(urls))
	took := make([]time.Duration, len(urls))
	use := make([][]usage, len(urls))
	for i, u := range urls {
		cs, err := clients(16, func() (*client.Client, error) { return connectHTTP(u) })
		if err != nil {
			return err
		}
		if _, _, err := doCalls(cs, 5, "warm"); err != nil {
			return err
		}
		round := 0
		arms = append(arms, withCPU(pids[i], len(cs)*perClient, func() (float64, error) {
			round++
			t, lat, err := doCalls(cs, perClient, fmt.Sprintf("run%d", round))
			calls[i] += len(lat)
			took[i] += t
			return median(lat), err
		}, &use[i]))
	}
	rate := func(i int) float64 { return float64(calls[i]) / took[i].Seconds() }
	// the server's CPU and thread runs per call (medians of rounds): a p50 at 16 closed-loop clients follows the CPU
	cpu := func(i int) string {
		return fmt.Sprintf("%.0f µs CPU, %.1f thread runs", medianUse(use[i], cpuOf)/1e3, medianUse(use[i], runsOf))
	}
	syncs := countSyncs(cmd.Process.Pid)
	ns, err := rounds(b.rounds, arms...)
	syncCount, syncErr := syncs()
	if err != nil {
		return err
	}
	perCall := "n/a (" + fmt.Sprint(syncErr) + ")"
	if syncErr == nil {
		perCall = fmt.Sprintf("%.2f", float64(syncCount)/float64(calls[0]))
	}
	same := fmt.Sprintf("without a state dir in the same rounds: %.2f ms, %.0f calls/s, %s", medianOf(ns, col(1))/1e6, rate(1), cpu(1))
	if b.base != "" {
		same += fmt.Sprintf("; %s: %.2f ms, %.0f calls/s, %s", filepath.Base(b.base), medianOf(ns, col(2))/1e6, rate(2), cpu(2))
	}
	b.add(fmt.Sprintf("durable do_* (--state-dir), 16 clients, %d calls; median of per-round p50s, the server's CPU per call (%s)", calls[0], same),
		fmt.Sprintf("%.0f calls/s, p50 %.2f ms, %s fdatasync per call, %s", rate(0), medianOf(ns, col(0))/1e6, perCall, cpu(0)),
		"≥ 1,500/s, p50 ≤ 3 ms, ≤ 1 fdatasync per call", b.rounds)
	return nil
}

// doCalls makes n do_* calls on each client (client i on setpoint i) with
// fresh keys, and returns the time and every call's latency.
func doCalls(cs []*client.Client, n int, tag string) (time.Duration, []float64, error) {
	var mu sync.Mutex
	var lat []float64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range cs {
		wg.Go(func() {
			mine := make([]float64, 0, n)
			for k := range n {
				t := time.Now()
				res, err := call(c, fmt.Sprintf("do_setpoint_%03d", i), map[string]any{"value": float64(20 + k%50), "idempotency_key": fmt.Sprintf("%s-%d-%d", tag, i, k)})
				if err == nil {
					if body, _ := res.StructuredContent.(map[string]any); body["status"] != "success" {
						err = fmt.Errorf("do_setpoint_%03d: %v", i, body)
					}
				}
				if err != nil {
					failed.Store(&err)
					return
				}
				mine = append(mine, float64(time.Since(t).Nanoseconds()))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return 0, nil, *err
	}
	return time.Since(start), lat, nil
}

// countSyncs counts pid's fsync and fdatasync calls with perf until the
// returned function is called.
func countSyncs(pid int) func() (int, error) {
	cmd := exec.Command("perf", "stat", "-x", ",", "-e", "syscalls:sys_enter_fdatasync,syscalls:sys_enter_fsync", "-p", strconv.Itoa(pid))
	var out bytes.Buffer
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return func() (int, error) { return 0, err }
	}
	time.Sleep(300 * time.Millisecond) // perf attaches
	return func() (int, error) {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		total, found := 0, 0
		for _, line := range strings.Split(out.String(), "\n") {
			f := strings.Split(line, ",")
			if len(f) > 2 && strings.HasPrefix(f[2], "syscalls:") {
				n, err := strconv.Atoi(f[0])
				if err != nil {
					return 0, fmt.Errorf("perf: %q", line)
				}
				total, found = total+n, found+1
			}
		}
		if found != 2 {
			return 0, fmt.Errorf("perf stat said %q", strings.TrimSpace(out.String()))
		}
		return total, nil
	}
}

// memory: resident memory after b.doCalls do_* from 16 clients over HTTP
// (the 32-capability device), without and with a state directory.
func (b *bench) memory(*modbusfault.TCP) error {
	for _, state := range []bool{false, true} {
		args := []string{"--simulate"}
		what := "no state dir"
		if state {
			args = append(args, "--state-dir", filepath.Join(b.dir, "state-memory"))
			what = "--state-dir"
		}
		url, cmd, err := b.serveHTTP("zones16", args...)
		if err != nil {
			return err
		}
		cs, err := clients(16, func() (*client.Client, error) { return connectHTTP(url) })
		if err != nil {
			return err
		}
		if _, _, err := doCalls(cs, b.doCalls/16, "mem"); err != nil {
			return err
		}
		for _, c := range cs {
			c.Close()
		}
		now, err := resident(cmd.Process.Pid)
		if err != nil {
			return err
		}
		// The collector returns freed memory in the background; what the
		// device holds once the calls stop is what stays.
		time.Sleep(settle)
		mem, err := resident(cmd.Process.Pid)
		if err != nil {
			return err
		}
		db := filepath.Join(b.dir, "state-memory", "state.db")
		if fi, err := os.Stat(db); err == nil && state {
			what += fmt.Sprintf(", state.db %.1f MB", float64(fi.Size())/1e6)
		}
		mapped, err := residentOf(cmd.Process.Pid, b.physmcpd, db)
		if err != nil {
			return err
		}
		files := fmt.Sprintf("the binary %.1f MB", mapped[b.physmcpd])
		if state {
			files += fmt.Sprintf(", state.db %.1f MB", mapped[db])
		}
		b.add(fmt.Sprintf("Full RSS %s after %d do_* (%s; anonymous %.1f MB, file-backed %.1f MB: %s; at once %.1f MB)", settle, b.doCalls/16*16, what, mem["RssAnon:"], mem["RssFile:"], files, now["VmRSS:"]),
			fmt.Sprintf("%.1f MB (peak %.1f MB)", mem["VmRSS:"], mem["VmHWM:"]), "≤ 25 MB", 0)
		b.stopAll()
	}
	return nil
}

// settle is how long memory is left to settle after the calls.
const settle = 10 * time.Second

// resident reads pid's memory lines (VmRSS, VmHWM, RssAnon, RssFile) in MB (10^6 bytes).
func resident(pid int) (map[string]float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	mem := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[2] == "kB" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			mem[f[0]] = kb * 1024 / 1e6
		}
	}
	return mem, nil
}

// residentOf reads how much of each file pid maps is resident, in MB, from
// its smaps.
func residentOf(pid int, files ...string) (map[string]float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, err
	}
	mb := map[string]float64{}
	var current string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			current = ""
			if len(f) >= 6 && slices.Contains(files, f[5]) {
				current = f[5]
			}
		case len(f) == 3 && f[0] == "Rss:" && current != "":
			kb, _ := strconv.ParseFloat(f[1], 64)
			mb[current] += kb * 1024 / 1e6
		}
	}
	return mb, nil
}

func cpuModel() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
