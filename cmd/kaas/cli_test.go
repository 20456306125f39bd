package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/proctest"
	"github.com/kaas-dev/kaas/internal/testutil"
)

// buildKaas builds this command into a temp dir.
func buildKaas(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kaas")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestCommandLine: help and --version exit 0; a bad command line exits 2
// with a message that names the fix, before anything starts.
func TestCommandLine(t *testing.T) {
	bin := buildKaas(t)
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		want string // in the combined output
	}{
		{[]string{"-h"}, 0, "Commands:"},
		{[]string{"broker", "-h"}, 0, "--data-dir=STRING"},
		{[]string{"--version"}, 0, "kaas "},
		{[]string{"broker", "--id", "0", "--data-dir", dir, "--dead-after", "3"}, 2, `"3" has no unit: use 3s`},
		{[]string{"broker", "--id", "0", "--data-dir", dir, "--default-partitions", "0"}, 2, "--default-partitions 0: a topic needs at least 1 partition"},
		{[]string{"broker", "--id", "0", "--data-dir", dir, "--listen", "0.0.0.0:9092"}, 2, "add --advertise"},
		{[]string{"broker", "--id", "0", "--data-dir", dir, "--listen", "0.0.0.0:9092", "--advertise", "[::]:9092"}, 2, "clients cannot connect to an unspecified address"},
		{[]string{"broker", "--id", "0", "--data-dir", dir, "--dead-after", "1s", "--report-interval", "1s"}, 2, "must be longer than --report-interval"},
		{[]string{"broker", "--data-dir", dir}, 2, "missing flags: --id"},
		{[]string{"dev", "--brokers", "0"}, 2, "--brokers 0: want 1..64"},
		{[]string{"launch"}, 2, "Run 'kaas --help' for the flags."},
	} {
		cmd := exec.Command(bin, c.args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || !strings.Contains(string(out), c.want) {
			t.Errorf("kaas %s: exit %d, output:\n%s\nwant exit %d and %q", strings.Join(c.args, " "), code, out, c.code, c.want)
		}
	}
}

// TestSecondInterruptExitsAtOnce: the first Ctrl-C drains, a second one
// ends the process at once instead of waiting for the drain.
func TestSecondInterruptExitsAtOnce(t *testing.T) {
	bin := buildKaas(t)
	d := startDev(t, bin, 2, "--data-dir", t.TempDir())
	cmd, stderr := d.cmd, d.stderr
	_ = cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(100 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGINT)
	err := d.wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("kaas dev exited %v after the second Ctrl-C: it finished the drain instead of ending at once\n%s", err, stderr.String())
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Fatalf("kaas dev ended with %v, want the second SIGINT to end it\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "Ctrl-C again to exit at once") {
		t.Errorf("the first Ctrl-C did not say how to exit at once:\n%s", stderr.String())
	}
}

// TestDevLogsEachFactOnceWithoutWarnings: a 3-broker kaas dev started and
// stopped with Ctrl-C, then started and stopped again on the same folder (a
// restart), logs no WARN or ERROR (stopping the last broker and an
// assignment left by the previous run's controller are normal), states each
// broker health change once (the controller's line, not one per broker),
// and its broker key always names the broker that logs, as kaas-N.
func TestDevLogsEachFactOnceWithoutWarnings(t *testing.T) {
	bin := buildKaas(t)
	dir := t.TempDir()
	for run := range 2 {
		checkDevLog(t, fmt.Sprintf("run %d", run+1), devRun(t, bin, dir))
	}
}

// devRun starts kaas dev with JSON logs, lets it idle two seconds, stops it
// with one Ctrl-C and returns its log.
func devRun(t *testing.T, bin, dir string) string {
	t.Helper()
	d := startDev(t, bin, 3, "--data-dir", dir, "--log-format", "json")
	cmd, stderr := d.cmd, d.stderr
	time.Sleep(2 * time.Second) // a few report intervals of an idle cluster
	_ = cmd.Process.Signal(syscall.SIGINT)
	if err := d.wait(); err != nil {
		t.Fatalf("kaas dev: %v\n%s", err, stderr.String())
	}
	return stderr.String()
}

func checkDevLog(t *testing.T, run, log string) {
	t.Helper()
	facts := map[string]int{}
	brokerKey := regexp.MustCompile(`^kaas-\d+$`)
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("%s: not a JSON log line: %q", run, line)
		}
		if lv := l["level"]; lv == "WARN" || lv == "ERROR" {
			t.Errorf("%s: a normal start and stop logged %s: %s", run, lv, line)
		}
		if b, ok := l["broker"]; ok {
			if s, _ := b.(string); !brokerKey.MatchString(s) {
				t.Errorf("%s: broker key %v is not the logging broker's kaas-N name: %s", run, b, line)
			}
		}
		if l["msg"] == "broker health" {
			facts[fmt.Sprint(l["peer"], " ", l["health"], " v", l["version"])]++
		}
	}
	if len(facts) == 0 {
		t.Fatalf("%s: no broker health line at all:\n%s", run, log)
	}
	for f, n := range facts {
		if n != 1 {
			t.Errorf("%s: broker health %s logged %d times", run, f, n)
		}
	}
}

// devProc is a running kaas dev.
type devProc struct {
	cmd    *exec.Cmd
	stderr *testutil.LockedBuffer
	exited chan struct{} // closed when the process has ended
	err    error         // its exit, once exited is closed
}

// wait returns the process's exit, waiting at most a minute.
func (d *devProc) wait() error {
	select {
	case <-d.exited:
		return d.err
	case <-time.After(time.Minute):
		_ = d.cmd.Process.Kill()
		<-d.exited
		return fmt.Errorf("still running a minute later: %v", d.err)
	}
}

// startDev starts kaas dev with n brokers on n consecutive free ports and no
// admin listener, and returns once it printed its bootstrap servers. A port
// taken between the choice and the bind ends kaas dev with "address already
// in use": it is started again on other ports, at most three times.
func startDev(t *testing.T, bin string, n int, args ...string) *devProc {
	t.Helper()
	for try := 1; ; try++ {
		port := proctest.FreePorts(t, n)
		cmd := exec.Command(bin, append([]string{"dev", "--brokers", fmt.Sprint(n), "--port", fmt.Sprint(port), "--admin-port", "0"}, args...)...)
		d := &devProc{cmd: cmd, stderr: &testutil.LockedBuffer{}, exited: make(chan struct{})}
		cmd.Stderr = d.stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ready := make(chan bool, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if strings.Contains(sc.Text(), "bootstrap servers") {
					select {
					case ready <- true:
					default:
					}
				}
			}
			d.err = cmd.Wait() // after the last read of stdout, as Wait requires
			close(d.exited)
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-d.exited
		})
		select {
		case <-ready:
			return d
		case <-d.exited:
			if try < 3 && strings.Contains(d.stderr.String(), "address already in use") {
				t.Logf("kaas dev on ports %d..%d: a port was taken, trying others", port, port+n-1)
				continue
			}
			t.Fatalf("kaas dev ended before it served: %v\n%s", d.err, d.stderr.String())
		case <-time.After(60 * time.Second):
			t.Fatalf("kaas dev did not start in 60s:\n%s", d.stderr.String())
		}
	}
}
