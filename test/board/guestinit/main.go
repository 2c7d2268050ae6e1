// Command guestinit is PID 1 of the board test's initramfs: it mounts the
// kernel file systems, loads the bus drivers' modules, waits for the device
// nodes, puts the serial console into raw mode and runs physmcpd on it with
// the arguments in /board/args (one per line). physmcpd's stdin and stdout
// are the console, so the host talks MCP to it over the UART; its logs go to
// the first UART, which the harness captures in a file.
//
// Before physmcpd starts, /board/gpio (when present) sets GPIO lines up the
// way another program on the board would, through a helper process named
// gpioset (the init binary run again under that name): "high N" drives line
// N of gpiochip0 high and releases it, as `gpioset` does; "hold N until M"
// requests line N, as a leftover `gpioset` would, and releases it once input
// line M goes high (the host's signal). The kernel reports the helper as the
// lines' consumer ("gpioset@PID").
//
// Lines for the harness start with "BOARD "; after "BOARD exec" the console
// carries only MCP. When physmcpd exits, the board reboots, which ends qemu
// (it runs with -no-reboot).
package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	pgpio "periph.io/x/conn/v3/gpio"
	"periph.io/x/host/v3"
	"periph.io/x/host/v3/gpioioctl"

	"golang.org/x/sys/unix"
)

func logf(format string, a ...any) { fmt.Printf("BOARD "+format+"\n", a...) }

func main() {
	if filepath.Base(os.Args[0]) == "gpioset" {
		gpioHelper(os.Args[1])
		return
	}
	for _, m := range []struct{ src, dst, fs string }{{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"}} {
		os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.fs, 0, ""); err != nil && err != unix.EBUSY {
			logf("mount %s: %v", m.dst, err)
		}
	}
	order, err := os.ReadFile("/modules/order")
	if err != nil {
		fail("module list: %v", err)
	}
	for _, name := range strings.Fields(string(order)) {
		if err := loadModule("/modules/" + name + ".ko"); err != nil {
			fail("module %s: %v", name, err)
		}
	}
	for _, node := range []string{"/dev/i2c-0", "/dev/gpiochip0"} {
		if !waitFor(node, 5*time.Second) {
			fail("%s did not appear", node)
		}
	}
	if _, err := os.Stat("/board/gpio"); err == nil {
		if err := startGPIOHelper("/board/gpio"); err != nil {
			fail("gpio set-up: %v", err)
		}
	}
	args, err := os.ReadFile("/board/args")
	if err != nil {
		fail("arguments: %v", err)
	}
	cmd := exec.Command("/physmcpd", strings.Split(strings.TrimSpace(string(args)), "\n")...)
	cmd.Stdin, cmd.Stdout = os.Stdin, os.Stdout
	cmd.Stderr = logSink()
	if err := rawConsole(); err != nil {
		fail("console: %v", err)
	}
	// Only emergency messages may still reach the console: a kernel line in
	// the middle of a JSON-RPC message would corrupt it.
	if err := os.WriteFile("/proc/sys/kernel/printk", []byte("1"), 0o644); err != nil {
		logf("printk level: %v", err)
	}
	logf("exec %s", strings.Join(cmd.Args, " "))
	err = cmd.Run()
	logf("physmcpd exited: %v", err)
	reboot()
}

// startGPIOHelper runs the gpioset helper on the set-up file and waits until
// it has done it.
func startGPIOHelper(setup string) error {
	cmd := &exec.Cmd{Path: "/init", Args: []string{"gpioset", setup}, Stderr: os.Stdout}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- strings.TrimSpace(line)
	}()
	select {
	case line := <-ready:
		if line != "ready" {
			return fmt.Errorf("helper: %q", line)
		}
	case <-time.After(10 * time.Second):
		return fmt.Errorf("helper not ready after 10 s")
	}
	logf("gpio set up by gpioset@%d", cmd.Process.Pid)
	return nil
}

// gpioHelper is the gpioset process: it applies the set-up file, says
// "ready" and keeps the lines it holds until the board stops.
func gpioHelper(setup string) {
	die := func(format string, a ...any) { fmt.Printf(format+"\n", a...); os.Exit(1) }
	text, err := os.ReadFile(setup)
	if err != nil {
		die("%v", err)
	}
	if _, err := host.Init(); err != nil {
		die("periph: %v", err)
	}
	var chip *gpioioctl.GPIOChip
	for _, c := range gpioioctl.Chips {
		if c.Name() == "gpiochip0" {
			chip = c
		}
	}
	if chip == nil {
		die("no gpiochip0")
	}
	lineAt := func(arg string) *gpioioctl.GPIOLine {
		n, err := strconv.Atoi(arg)
		l := chip.ByNumber(n)
		if err != nil || l == nil {
			die("no line %s on gpiochip0", arg)
		}
		return l
	}
	for _, line := range strings.Split(strings.TrimSpace(string(text)), "\n") {
		switch f := strings.Fields(line); {
		case len(f) == 2 && f[0] == "high":
			l := lineAt(f[1])
			if err := l.Out(pgpio.High); err != nil {
				die("line %s high: %v", f[1], err)
			}
			l.Close()
		case len(f) == 4 && f[0] == "hold" && f[2] == "until":
			held, signal := lineAt(f[1]), lineAt(f[3])
			if err := held.In(pgpio.PullNoChange, pgpio.NoEdge); err != nil {
				die("holding line %s: %v", f[1], err)
			}
			if err := signal.In(pgpio.PullNoChange, pgpio.RisingEdge); err != nil {
				die("line %s as the release signal: %v", f[3], err)
			}
			go func() {
				for !signal.WaitForEdge(time.Second) && signal.Read() != pgpio.High {
					// Read catches a rise before the first wait
				}
				held.Close()
			}()
		default:
			die("set-up line %q: want high N or hold N until M", line)
		}
	}
	fmt.Println("ready")
	for {
		time.Sleep(time.Hour) // holding the lines
	}
}

// loadModule loads one uncompressed module without dependencies.
func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && err != unix.EEXIST {
		return err
	}
	return nil
}

func waitFor(path string, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return true
		}
	}
	return false
}

// logSink is the first UART (ttymxc0) when the board has it, else a file.
func logSink() *os.File {
	f, err := os.OpenFile("/dev/ttymxc0", os.O_WRONLY|unix.O_NOCTTY, 0)
	if err == nil {
		if t, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
			t.Oflag |= unix.OPOST | unix.ONLCR
			unix.IoctlSetTermios(int(f.Fd()), unix.TCSETS, t)
		}
		logf("physmcpd logs to /dev/ttymxc0")
		return f
	}
	logf("physmcpd logs to /physmcpd.log: /dev/ttymxc0: %v", err)
	f, err = os.Create(filepath.Join("/", "physmcpd.log"))
	if err != nil {
		fail("log file: %v", err)
	}
	return f
}

// rawConsole turns off echo, line editing and newline translation on the
// console (cfmakeraw), so bytes pass unchanged in both directions.
func rawConsole() error {
	t, err := unix.IoctlGetTermios(0, unix.TCGETS)
	if err != nil {
		return err
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	return unix.IoctlSetTermios(0, unix.TCSETS, t)
}

func fail(format string, a ...any) {
	logf("FAIL "+format, a...)
	reboot()
}

// reboot ends qemu (-no-reboot turns a restart into an exit).
func reboot() {
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART); err != nil {
		logf("reboot: %v", err)
	}
	select {}
}
