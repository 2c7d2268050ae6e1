// Command footprint measures one physmcpd binary serving a generated
// 50-capability device (simulated buses) over stdio: the time from exec to
// READY=1 (sd_notify) over several starts (median and 95th percentile), the
// time to the first initialize answer, the resident memory under a steady
// read load, and the most reads per second it answers with 4 callers that
// never wait. bench/footprint.sh runs it for the Full and the Lite build.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

func main() {
	bin := flag.String("bin", "dist/physmcpd-amd64", "the physmcpd binary")
	profile := flag.String("profile", "full", "full or lite")
	caps := flag.Int("caps", 50, "capabilities in the generated manifest")
	duration := flag.Duration("duration", 10*time.Second, "how long to keep the read load up")
	rate := flag.Int("rate", 200, "reads per second (spread over 4 clients' worth of concurrency)")
	starts := flag.Int("starts", 20, "starts to time (the median and the 95th percentile are reported)")
	burst := flag.Duration("burst", 5*time.Second, "how long to read as fast as the server answers (throughput)")
	flag.Parse()
	if err := run(*bin, *profile, *caps, *duration, *rate, *starts, *burst); err != nil {
		fmt.Fprintln(os.Stderr, "footprint:", err)
		os.Exit(1)
	}
}

func run(bin, profile string, caps int, duration time.Duration, rate, starts int, burst time.Duration) error {
	dir, err := os.MkdirTemp("", "footprint")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	manifest, policy := filepath.Join(dir, "m.yml"), filepath.Join(dir, "p.yml")
	if err := os.WriteFile(manifest, []byte(genManifest(caps)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(policy, []byte("physmcp_policy_version: \"0.1\"\nidentity:\n  local_role: operator\n"), 0o644); err != nil {
		return err
	}
	args := []string{"serve", "--manifest", manifest, "--policy", policy, "--simulate", "--stdio", "--profile", profile, "--log-level", "warn"}
	if profile == "full" {
		args = append(args, "--state-dir", filepath.Join(dir, "state"))
	}
	var readies, inits []time.Duration
	for i := 0; i < starts; i++ {
		s, err := start(bin, args, dir)
		if err != nil {
			return err
		}
		readies, inits = append(readies, s.ready), append(inits, s.initialized)
		s.stop()
	}
	s, err := start(bin, args, dir)
	if err != nil {
		return err
	}
	defer s.stop()
	tools, err := s.c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		return err
	}
	var reads []string
	for _, t := range tools.Tools {
		if strings.HasPrefix(t.Name, "read_") {
			reads = append(reads, t.Name)
		}
	}
	calls, failures, rssAvg, hwm := s.load(reads, duration, rate)
	pid := s.cmd.Process.Pid
	anon, file := status(pid, "RssAnon"), status(pid, "RssFile")
	burstCalls, burstFailures, _, _ := s.load(reads, burst, 0)
	fmt.Printf("profile=%s caps=%d tools=%d ready_ms=%.1f ready_p95_ms=%.1f initialize_ms=%.1f reads=%d failed=%d rss_steady_kb=%d rss_peak_kb=%d rss_anon_kb=%d rss_file_kb=%d reads_per_s=%.0f\n",
		profile, caps, len(tools.Tools), ms(quantile(readies, 0.5)), ms(quantile(readies, 0.95)), ms(quantile(inits, 0.5)),
		calls+burstCalls, failures+burstFailures, rssAvg, hwm, anon, file, float64(burstCalls)/burst.Seconds())
	return nil
}

// genManifest is a device with n capabilities on simulated buses: mostly
// I2C and GPIO reads, a tenth of them writes.
func genManifest(n int) string {
	var b strings.Builder
	b.WriteString("physmcp_version: \"0.1\"\ndevice: {id: footprint_bench, type: bench}\nbuses:\n")
	b.WriteString("  i2c1: {type: i2c, device: \"1\", simulated: true}\n  gpio: {type: gpio, chip: bench-gpio, simulated: true}\ncapabilities:\n")
	for i := 0; i < n; i++ {
		switch {
		case i%10 == 9:
			fmt.Fprintf(&b, "  - {name: relay_%d, kind: do, description: Relay %d., binding: {bus: gpio, offset: %d, safe_level: low}, data_type: bool, semantic_tags: [relay], side_effects: [a load switches], safe_value: false}\n", i, i, i)
		case i%2 == 0:
			fmt.Fprintf(&b, "  - {name: temperature_%d, kind: read, description: Temperature %d., binding: {bus: i2c1, address: \"0x%02x:reg=0x00:width=2:byte_order=big:signed=true:shift=4:scale=0.0625\"}, data_type: float, unit: \"°C\", range: {min: -40, max: 125}, semantic_tags: [temperature], cache_ttl_ms: 100, simulation: {initial: 21.5, noise: 0.1}}\n", i, i, 0x08+i)
		default:
			fmt.Fprintf(&b, "  - {name: contact_%d, kind: read, description: Contact %d., binding: {bus: gpio, offset: %d}, data_type: bool, semantic_tags: [contact]}\n", i, i, i)
		}
	}
	return b.String()
}

type server struct {
	cmd         *exec.Cmd
	c           *client.Client
	ready       time.Duration
	initialized time.Duration
}

// start execs physmcpd with its own notify socket and waits for READY=1,
// then initializes an MCP session.
func start(bin string, args []string, dir string) (*server, error) {
	sock := filepath.Join(dir, "notify-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	defer notify.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd}
	buf := make([]byte, 64)
	notify.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		n, err := notify.Read(buf)
		if err != nil {
			s.kill()
			return nil, fmt.Errorf("waiting for READY=1: %w\n%s", err, stderr.String())
		}
		if string(buf[:n]) == "READY=1" {
			s.ready = time.Since(t0)
			break
		}
	}
	s.c = client.NewClient(transport.NewIO(stdout, stdin, io.NopCloser(strings.NewReader(""))))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.c.Start(ctx); err != nil {
		s.kill()
		return nil, err
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "footprint", Version: "0"}
	if _, err := s.c.Initialize(ctx, init); err != nil {
		s.kill()
		return nil, err
	}
	s.initialized = time.Since(t0)
	return s, nil
}

// load keeps `rate` reads per second (0: as many as the server answers)
// going for d over 4 concurrent callers, sampling VmRSS every 100 ms; it
// returns the mean RSS of the second half and VmHWM.
func (s *server) load(tools []string, d time.Duration, rate int) (calls, failures int64, rssSteady, hwm int64) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	const workers = 4
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var tick <-chan time.Time // nil without a rate: never waits
			if rate > 0 {
				t := time.NewTicker(time.Duration(int64(time.Second) * workers / int64(rate)))
				defer t.Stop()
				tick = t.C
			}
			for i := w; ; i += workers {
				if tick == nil {
					if ctx.Err() != nil {
						return
					}
				} else {
					select {
					case <-ctx.Done():
						return
					case <-tick:
					}
				}
				req := mcp.CallToolRequest{}
				req.Params.Name = tools[i%len(tools)]
				res, err := s.c.CallTool(context.Background(), req)
				atomic.AddInt64(&calls, 1)
				if err != nil || res.IsError {
					atomic.AddInt64(&failures, 1)
				}
			}
		}(w)
	}
	var samples []int64
	t := time.NewTicker(100 * time.Millisecond)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-t.C:
			samples = append(samples, status(s.cmd.Process.Pid, "VmRSS"))
		}
	}
	t.Stop()
	wg.Wait()
	half := samples[len(samples)/2:]
	var sum int64
	for _, v := range half {
		sum += v
	}
	return calls, failures, sum / int64(max(len(half), 1)), status(s.cmd.Process.Pid, "VmHWM")
}

// status reads a kB field of /proc/PID/status.
func status(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return -1
}

func (s *server) stop() {
	if s.c != nil {
		s.c.Close()
	}
	s.kill()
}

func (s *server) kill() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// quantile is the q-th quantile of d (nearest rank).
func quantile(d []time.Duration, q float64) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[min(int(float64(len(d))*q), len(d)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
