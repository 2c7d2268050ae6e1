package board

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/internal/modbusfault"
	"github.com/physmcp/physmcpd/internal/testenv"
)

const (
	repo = "../.."
	// The modules the guest loads, in order (Debian builds them as modules, without dependencies).
	modules = "i2c-imx i2c-dev gpio-mxc imx2_wdt"
	// gpio1 in qemu's sabrelite = the kernel's 209c000.gpio = /dev/gpiochip0.
	gpioDevice = "/machine/soc/gpio1"
	gpioNode   = "/soc/bus@2000000/gpio@209c000"                    // in the DTB
	uart1Node  = "/soc/bus@2000000/spba-bus@2000000/serial@2020000" // ttymxc0
	// UART3..5 (ttymxc2..4), disabled in the DTB, carry the RS-485 buses.
	uart3Node = "/soc/bus@2100000/serial@21ec000"
	uart4Node = "/soc/bus@2100000/serial@21f0000"
	uart5Node = "/soc/bus@2100000/serial@21f4000"
	setupHint = "run .ci/setup.d/50-qemu.sh (as root): it installs qemu-system-arm and fdtput and extracts Debian's armmp kernel into .cache/board/"
)

// The lines of gpio1 the manifest binds, and the one the host raises to
// make the other program release the pump's line.
const ledLine, buttonLine, relayLine, pumpLine, releaseLine = 5, 6, 7, 8, 9

// dirLine is the RS-485 direction line of the bus on UART5 (direction gpio).
const dirLine = 10

// lineNames are the gpio-line-names the test gives gpio1 in the device tree
// (Debian's DTB names none), so the manifest finds lines by name.
var lineNames = map[int]string{ledLine: "STATUS_LED", buttonLine: "BUTTON", relayLine: "RELAY", pumpLine: "PUMP", dirLine: "RS485_DE"}

// prerequisites finds qemu-system-arm and the cached kernel, skipping (or
// failing on CI) without them.
func prerequisites(t *testing.T) (qemu, kernelDir string) {
	t.Helper()
	missing := func(what string) { testenv.Missing(t, "%s is missing: %s", what, setupHint) }
	qemu, err := exec.LookPath("qemu-system-arm")
	if err != nil {
		missing("qemu-system-arm")
	}
	if _, err := exec.LookPath("fdtput"); err != nil {
		missing("fdtput (device-tree-compiler)")
	}
	dirs, _ := filepath.Glob(filepath.Join(repo, ".cache/board/*/vmlinuz"))
	if len(dirs) == 0 {
		missing("the armmp kernel")
	}
	sort.Strings(dirs)
	return qemu, filepath.Dir(dirs[len(dirs)-1])
}

func goBuild(t *testing.T, out, pkg string, env ...string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = repo
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm", "GOARM=7"), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, b)
	}
}

// buildInitramfs packs the guest: init, physmcpd (GOARM=7 via build.sh; the
// full or the lite build), the modules, and the test's manifest, policy and
// serve arguments.
func buildInitramfs(t *testing.T, kernelDir, to, build string, serveArgs []string) {
	t.Helper()
	work := t.TempDir()
	buildSh := exec.Command("./build.sh", "armv7")
	buildSh.Dir = repo
	buildSh.Env = append(os.Environ(), "OUT="+work, "VERSION=board-test", "BUILDS="+build)
	if b, err := buildSh.CombinedOutput(); err != nil {
		t.Fatalf("build.sh armv7: %v\n%s", err, b)
	}
	binary := map[string]string{"full": "physmcpd-armv7", "lite": "physmcpd-lite-armv7"}[build]
	goBuild(t, filepath.Join(work, "init"), "./test/board/guestinit")
	r := newInitramfs()
	for _, f := range []struct {
		name, from string
		exec       bool
	}{
		{"/init", filepath.Join(work, "init"), true},
		{"/physmcpd", filepath.Join(work, binary), true},
		{"/board/physmcp.manifest.yml", "testdata/physmcp.manifest.yml", false},
		{"/board/physmcp.policy.yml", "testdata/physmcp.policy.yml", false},
	} {
		if err := r.addFile(f.name, f.from, f.exec); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range strings.Fields(modules) {
		if err := r.addFile("/modules/"+m+".ko", filepath.Join(kernelDir, "modules", m+".ko"), false); err != nil {
			t.Fatal(err)
		}
	}
	r.add("/modules/order", []byte(modules+"\n"), false)
	// What another program does to the lines before physmcpd starts
	// (guestinit's gpioset helper): the relay's line is high (its off
	// level) and the pump's line is held until the host raises releaseLine.
	r.add("/board/gpio", fmt.Appendf(nil, "high %d\nhold %d until %d\n", relayLine, pumpLine, releaseLine), false)
	r.add("/board/args", []byte(strings.Join(serveArgs, "\n")+"\n"), false)
	if err := r.write(to); err != nil {
		t.Fatal(err)
	}
}

// patchDTB writes the kernel's sabrelite DTB with what the test needs:
// gpio1's lines named (Debian's DTB names none), so the manifest finds
// lines by name, and UART1 (physmcpd's log) without DMA, which qemu's
// sabrelite does not emulate for it: with DMA the kernel never sends and a
// writer blocks once the tty buffer is full. UART3 and UART4 are enabled the
// same way (and UART5), with RTS wired (uart-has-rtscts): the i.MX driver
// offers its RS-485 mode only on a UART with RTS.
func patchDTB(t *testing.T, kernelDir, to string) {
	t.Helper()
	dtb, err := os.ReadFile(filepath.Join(kernelDir, "imx6q-sabrelite.dtb"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, dtb, 0o644); err != nil {
		t.Fatal(err)
	}
	names := []string{"-t", "s", to, gpioNode, "gpio-line-names"}
	for i := range 32 {
		names = append(names, lineNames[i])
	}
	edits := [][]string{names, {"-d", to, uart1Node, "dmas", "dma-names"}}
	for _, node := range []string{uart3Node, uart4Node, uart5Node} {
		edits = append(edits, []string{"-d", to, node, "dmas", "dma-names"},
			[]string{"-t", "s", to, node, "status", "okay"}, []string{"-t", "s", to, node, "uart-has-rtscts", ""})
	}
	for _, args := range edits {
		if b, err := exec.Command("fdtput", args...).CombinedOutput(); err != nil {
			t.Fatalf("fdtput %s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
}

// board is one running qemu with its control channels.
type board struct {
	qmp     *qmp
	gpio    *qtest
	console *console
	mcp     *client.Client
	uart1   string           // physmcpd's log (the first UART)
	modbus  *modbusfault.RTU // the Modbus device on UART3 (RS-485, kernel mode)
	modbus5 *modbusfault.RTU // the one on UART5 (RS-485, direction gpio)
}

// boot starts the board with the Full build serving MCP on its stdio, which
// is the console UART.
func boot(t *testing.T, ctx context.Context) *board {
	t.Helper()
	return bootWith(t, ctx, "full", "--stdio", "--state-dir", "/state")
}

// bootWith starts the board with physmcpd's build (full or lite) serving the
// board's manifest with these further arguments.
func bootWith(t *testing.T, ctx context.Context, build string, serveArgs ...string) *board {
	t.Helper()
	qemu, kernelDir := prerequisites(t)
	dir := t.TempDir()
	initrd, dtb := filepath.Join(dir, "initramfs.cpio.gz"), filepath.Join(dir, "sabrelite.dtb")
	patchDTB(t, kernelDir, dtb)
	// --trust-clock: the guest runs no NTP client, so its kernel never calls
	// the clock synchronised and every reading would be degraded.
	buildInitramfs(t, kernelDir, initrd, build, append([]string{"serve", "--manifest", "/board/physmcp.manifest.yml",
		"--policy", "/board/physmcp.policy.yml", "--log-level", "debug", "--trust-clock"}, serveArgs...))
	b := &board{uart1: filepath.Join(dir, "uart1.log"), modbus: modbusfault.StartRTU(t), modbus5: modbusfault.StartRTU(t)}
	b.modbus.Device.Set(modbusfault.HoldingRegisters, 0, 1234)
	b.modbus5.Device.Set(modbusfault.HoldingRegisters, 0, 77)
	qmpSock, qtestSock := filepath.Join(dir, "qmp.sock"), filepath.Join(dir, "qtest.sock")
	cmd := exec.Command(qemu, "-M", "sabrelite", "-smp", "1", "-m", "256M",
		"-display", "none", "-monitor", "none", "-no-reboot", "-accel", "tcg",
		"-serial", "file:"+b.uart1, "-serial", "stdio", // UART1: physmcpd's log; UART2: console and MCP
		"-serial", b.modbus.PTY(), "-serial", "null", "-serial", b.modbus5.PTY(), // UART3, 5: Modbus devices on the host's ptys; UART4: nothing
		"-kernel", filepath.Join(kernelDir, "vmlinuz"), "-dtb", dtb,
		"-initrd", initrd,
		"-device", "tmp105,id=temp0,bus=i2c-bus.0,address=0x48", // i2c-bus.0 = i2c1@21a0000 = /dev/i2c-0
		"-qmp", "unix:"+qmpSock+",server=on,wait=off", "-qtest", "unix:"+qtestSock+",server=on,wait=off",
		"-append", "console=ttymxc1,115200 quiet")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("console:\n%s", b.console.log())
			if log, err := os.ReadFile(b.uart1); err == nil {
				t.Logf("physmcpd log (UART1):\n%s", log)
			}
			t.Logf("qemu stderr:\n%s", stderr.String())
		}
	})
	b.console = newConsole(stdout)
	if b.qmp, err = dialQMP(qmpSock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.qmp.close)
	if b.gpio, err = dialQtest(qtestSock, gpioDevice); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.gpio.close)

	select {
	case <-b.console.execed:
	case <-ctx.Done():
		t.Fatal("the guest never started physmcpd")
	}
	b.mcp = client.NewClient(transport.NewIO(b.console.mcp, stdin, io.NopCloser(strings.NewReader(""))))
	if err := b.mcp.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "board-test", Version: "0"}
	if _, err := b.mcp.Initialize(ctx, init); err != nil {
		t.Fatalf("initialize over the serial console: %v", err)
	}
	return b
}

// call returns a tool's proMCP body.
func (b *board) call(t *testing.T, ctx context.Context, tool string, args map[string]any) map[string]any {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = tool, args
	res, err := b.mcp.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(res.Content[0].(mcp.TextContent).Text), &body); err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return body
}

// eventually calls tool until ok accepts its body or the deadline passes.
func (b *board) eventually(t *testing.T, ctx context.Context, tool string, within time.Duration, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	var body map[string]any
	for end := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		if body = b.call(t, ctx, tool, nil); ok(body) || time.Now().After(end) {
			return body
		}
	}
}

// toolNames lists the served tools, space-separated, in the server's order.
func (b *board) toolNames(t *testing.T, ctx context.Context) string {
	t.Helper()
	list, err := b.mcp.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	return strings.Join(names, " ")
}

func TestBoard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	b := boot(t, ctx)

	if got, want := b.toolNames(t, ctx), "can_do do_overtemp_limit do_pump do_relay do_status_led read_board_temperature read_button_pressed read_expansion_temperature read_line_pressure read_missing_sensor_temperature read_overtemp_limit read_return_pressure read_tank_level"; got != want {
		t.Fatalf("tools %s, want %s", got, want)
	}

	t.Run("temperature follows the sensor", func(t *testing.T) {
		before := b.call(t, ctx, "read_board_temperature", nil)
		if before["quality"] != "good" || before["value"] == 42.5 {
			t.Fatalf("first read %v: want a good reading other than 42.5", before)
		}
		if err := b.qmp.do("qom-set", map[string]any{"path": "/machine/peripheral/temp0", "property": "temperature", "value": 42500}); err != nil {
			t.Fatal(err)
		}
		after := b.eventually(t, ctx, "read_board_temperature", 5*time.Second, func(r map[string]any) bool { return r["value"] == 42.5 })
		if after["value"] != 42.5 || after["quality"] != "good" {
			t.Errorf("after setting 42.5 °C over QMP: %v (before: %v)", after, before)
		}
	})

	t.Run("a missing sensor reads as an error, not a value", func(t *testing.T) {
		r := b.call(t, ctx, "read_missing_sensor_temperature", nil)
		if r["quality"] != "error" || r["value"] != nil {
			t.Errorf("read at an address nothing answers: %v", r)
		}
	})

	t.Run("the host sees do_status_led", func(t *testing.T) {
		// The safe level (low) is driven at start-up. Lines reset low and
		// qtest reports changes only, so the host must have seen none.
		if h := b.gpio.history(ledLine); len(h) > 0 {
			t.Errorf("before any do_status_led the host saw line %d at %v, want it left at the safe level (low)", ledLine, h)
		}
		for _, on := range []bool{true, false, true} {
			d := b.call(t, ctx, "do_status_led", map[string]any{"value": on})
			if d["status"] != "success" {
				t.Fatalf("do_status_led %v: %v", on, d)
			}
			want := map[bool]int{true: 1, false: 0}[on]
			if last, ok := b.gpio.waitOutput(ledLine, want, 5*time.Second); !ok {
				t.Errorf("do_status_led %v: the host saw line %d at %d, want %d", on, ledLine, last, want)
			}
		}
	})

	t.Run("read_button_pressed is the level the host drives", func(t *testing.T) {
		for _, level := range []int{1, 0, 1} {
			if err := b.gpio.drive(buttonLine, level); err != nil {
				t.Fatal(err)
			}
			want := level == 1
			r := b.eventually(t, ctx, "read_button_pressed", 5*time.Second, func(r map[string]any) bool { return r["value"] == want })
			if r["value"] != want || r["quality"] != "good" {
				t.Errorf("host drove line %d to %d: read %v", buttonLine, level, r)
			}
		}
	})

	t.Run("the range guard refuses and nothing is written", func(t *testing.T) {
		before := b.call(t, ctx, "read_overtemp_limit", nil)
		if before["quality"] != "good" || before["value"] != 80.0 {
			t.Fatalf("alert threshold after start-up: %v, want the safe value 80", before)
		}
		refused := b.call(t, ctx, "do_overtemp_limit", map[string]any{"value": 100})
		if refused["status"] != "failed" || !strings.Contains(fmt.Sprint(refused["permission"]), "range") {
			t.Errorf("do_overtemp_limit 100 (guard 30..90): %v", refused)
		}
		if r := b.call(t, ctx, "read_overtemp_limit", nil); r["value"] != 80.0 {
			t.Errorf("after the refusal the threshold reads %v, want 80", r)
		}
		if d := b.call(t, ctx, "do_overtemp_limit", map[string]any{"value": 60}); d["status"] != "success" {
			t.Errorf("do_overtemp_limit 60: %v", d)
		}
		if r := b.call(t, ctx, "read_overtemp_limit", nil); r["value"] != 60.0 {
			t.Errorf("after writing 60 the threshold reads %v", r)
		}
	})

	t.Run("an output starts at its safe level without passing another", func(t *testing.T) {
		// gpioset left RELAY high (its off level, active-low) before
		// physmcpd started; the host has logged every level the line took
		// since boot. Requesting the line as an output and then setting it
		// (periph's way) drives it low in between, which the log shows
		// however short; a request that carries the value leaves it alone.
		if h := b.gpio.history(relayLine); fmt.Sprint(h) != "[1]" {
			t.Fatalf("line %d since boot: %v, want [1] (gpioset's high, untouched by physmcpd's start)", relayLine, h)
		}
		for _, on := range []bool{true, false} {
			if d := b.call(t, ctx, "do_relay", map[string]any{"value": on}); d["status"] != "success" {
				t.Fatalf("do_relay %v: %v", on, d)
			}
			want := map[bool]int{true: 0, false: 1}[on] // active-low
			if last, ok := b.gpio.waitOutput(relayLine, want, 5*time.Second); !ok {
				t.Errorf("do_relay %v: the host saw line %d at %d, want %d", on, relayLine, last, want)
			}
		}
	})

	t.Run("a line another process holds is unavailable, names its holder and is used once free", func(t *testing.T) {
		const holder = `line 8 ("PUMP") on gpiochip0 is busy: held by "gpioset@`
		d := b.call(t, ctx, "do_pump", map[string]any{"value": true})
		if d["status"] != "failed" || d["permission"] != "source_unreachable" || !strings.Contains(fmt.Sprint(d["reason"]), holder) {
			t.Errorf("do_pump: %v; want failed, source_unreachable, reason naming the holder (%s...)", d, holder)
		}
		if h := b.gpio.history(pumpLine); len(h) > 0 {
			t.Errorf("the host saw line %d driven to %v", pumpLine, h)
		}
		log, err := os.ReadFile(b.uart1)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), strings.ReplaceAll(holder, `"`, `\"`)) {
			t.Errorf("physmcpd's log does not name the holder (%s...)", holder)
		}
		// gpioset lets go; physmcpd requests the line in the background
		// (retrying every 2 s at most), at its safe level (low: the host sees nothing).
		if err := b.gpio.drive(releaseLine, 1); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(10 * time.Second); d["status"] != "success" && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			if h := b.gpio.history(pumpLine); len(h) > 0 {
				t.Fatalf("before do_pump succeeded the host saw line %d driven to %v", pumpLine, h)
			}
			d = b.call(t, ctx, "do_pump", map[string]any{"value": true})
		}
		if d["status"] != "success" {
			t.Fatalf("do_pump 10 s after the line was released: %v", d)
		}
		if last, ok := b.gpio.waitOutput(pumpLine, 1, 5*time.Second); !ok {
			t.Errorf("do_pump true: the host saw line %d at %d, want 1", pumpLine, last)
		}
	})

	t.Run("RS-485 kernel mode on the i.MX UART", func(t *testing.T) {
		// ttymxc2 took TIOCSRS485 (RTS on send, 1 ms after) and read it
		// back unchanged: the bus serves the device on the host's pty.
		if r := b.call(t, ctx, "read_line_pressure", nil); r["quality"] != "good" || r["value"] != 1234.0 {
			t.Errorf("read over RS-485 in kernel mode: %v", r)
		}
		if n := b.modbus.Device.Requests(3); n == 0 {
			t.Error("the Modbus device on UART3 got no request")
		}
		// On ttymxc3 RTS after send (RTS low while sending) makes the i.MX
		// driver keep the receiver on too; physmcpd reads that back and
		// refuses: the frame's echo would be taken for the reply.
		r := b.call(t, ctx, "read_return_pressure", nil)
		if want := "the driver changed the kernel RS-485 settings: rx_during_tx asked false, got true"; r["quality"] != "error" || !strings.Contains(fmt.Sprint(r["detail"]), want) {
			t.Errorf("read on the bus whose setting the driver changed: %v, want quality error naming %q", r, want)
		}
	})

	t.Run("RS-485 direction gpio drives its line around each frame", func(t *testing.T) {
		// The line was requested at receive (low): the host saw no change.
		if h := b.gpio.history(dirLine); len(h) > 0 {
			t.Fatalf("before any frame the host saw the direction line at %v", h)
		}
		for range 3 {
			if r := b.call(t, ctx, "read_tank_level", nil); r["quality"] != "good" || r["value"] != 77.0 {
				t.Fatalf("read over RS-485 with a GPIO direction line: %v", r)
			}
		}
		// High for each request the device got, low again before its reply was read.
		frames := b.modbus5.Device.Requests(3)
		want := strings.Repeat("1 0 ", frames)
		if h := fmt.Sprint(b.gpio.history(dirLine)); frames < 3 || h != "["+strings.TrimSpace(want)+"]" {
			t.Errorf("the host saw the direction line at %s over %d requests, want [%s]", h, frames, strings.TrimSpace(want))
		}
	})

	t.Run("an absent I2C adapter reads as an error", func(t *testing.T) {
		r := b.call(t, ctx, "read_expansion_temperature", nil)
		if r["quality"] != "error" || r["value"] != nil || !strings.Contains(fmt.Sprint(r["detail"]), "/dev/i2c-7") {
			t.Errorf("read on /dev/i2c-7, which the board lacks: %v", r)
		}
	})

	if f := b.gpio.failures(); len(f) > 0 && f[0] != "qtest socket closed" {
		t.Errorf("qtest: %v", f)
	}
}
