// Package proctest runs kaas brokers as separate OS processes over one
// shared temp folder, for tests that need real crashes: kill -9, SIGTERM
// drains, SIGSTOP freezes beyond the liveness timeout.
//
// It builds the kaas binary once per test process (Binary), allocates
// listener ports on 127.0.0.1, writes each broker's log to a file, and
// registers a t.Cleanup that always kills every child process group. It
// imports no kaas package but the test helpers (testutil, powerfs): it
// drives the binary only through its command line, signals and the Kafka
// protocol. StallingVolume gives each broker its own mount of a volume
// whose calls stall as a network file system's do.
package proctest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kaas-dev/kaas/internal/testutil"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildPath string
	buildErr  error
)

// Binary returns the path of a kaas binary built from this module, building
// it on first use. The build lives in a temp dir that Main removes.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		_, file, _, ok := runtime.Caller(0)
		if !ok {
			buildErr = errors.New("proctest: cannot locate the module")
			return
		}
		root := filepath.Join(filepath.Dir(file), "..", "..")
		buildDir, buildErr = os.MkdirTemp("", "kaas-proctest-bin-")
		if buildErr != nil {
			return
		}
		buildPath = filepath.Join(buildDir, "kaas")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", buildPath, "./cmd/kaas")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("proctest: go build ./cmd/kaas: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// Main runs the tests and removes the binary built by Binary. Use it from
// TestMain: func TestMain(m *testing.M) { os.Exit(proctest.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	return code
}

var (
	portsMu sync.Mutex
	used    = map[int]bool{}
)

// FreePort returns a 127.0.0.1 port that was free a moment ago and that this
// process has not handed out before. It is chosen below the kernel's
// ephemeral range (ip_local_port_range): a port from that range may be taken
// as the local port of any outgoing connection (a client, a broker's peer
// report) between this call and the broker binding it, which failed a start
// with "address already in use" now and then.
func FreePort(t testing.TB) int {
	t.Helper()
	return FreePorts(t, 1)
}

// FreePorts is FreePort for n consecutive ports (kaas dev's --port and
// --admin-port take one per broker): it returns the first of n ports
// that were all free a moment ago.
func FreePorts(t testing.TB, n int) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	lo, hi := belowEphemeral()
next:
	for range 200 {
		p := lo + rand.IntN(hi-lo-n+1)
		var open []net.Listener
		for q := p; q < p+n; q++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
			if used[q] || err != nil {
				if err == nil {
					l.Close()
				}
				for _, o := range open {
					o.Close()
				}
				continue next
			}
			open = append(open, l)
		}
		for i, o := range open {
			o.Close()
			used[p+i] = true
		}
		return p
	}
	t.Fatalf("proctest: no %d free consecutive ports after 200 tries", n)
	return 0
}

// belowEphemeral is the range FreePort draws from: the 12,000 ports below
// the first ephemeral port (Linux's default range starts at 32768), never
// below 1024.
func belowEphemeral() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 2048 {
				hi = v
			}
		}
	}
	return max(1024, hi-12000), hi
}

// Options shape a cluster. Zero values take the defaults noted.
type Options struct {
	Brokers        int           // default 3
	DeadAfter      time.Duration // --dead-after; default 3s (the binary's default)
	ReportInterval time.Duration // --report-interval; default 1s
	ReadyTimeout   time.Duration // how long Start waits for "serving clients"; default 45s
	LogDir         string        // where broker-<id>.log go; default t.TempDir()
	DataDir        string        // the shared folder (it must exist); default t.TempDir()
	// DataDirs, when set, gives each broker its own path to the shared
	// folder (DataDirs[i] for broker i): one mount per broker of a network
	// file system, each its own client. DataDir is then the path the test
	// itself reads (default DataDirs[0]).
	DataDirs []string
	// Advertise, when set, is the address each broker tells clients
	// (--advertise; Advertise[i] for broker i): a forwarder's in front of
	// it, such as a wiretap.Tap.
	Advertise []string
	Args      []string // extra flags for every broker
	Env       []string // extra KEY=value environment for every broker

	// Another broker than kaas (the Apache Kafka reference, kafkaref):
	// Command gives broker id's command line, instead of the kaas binary
	// and its flags (DataDir, DeadAfter, ReportInterval, Advertise and Args
	// are then the command's business); Ready is the log line that says a
	// run serves clients (default kaas's "serving clients"); TermStatus is
	// the exit status a SIGTERM drain ends with (kaas: 0; a JVM that ran
	// its shutdown hooks: 143).
	Command    func(id int32) []string
	Ready      string
	TermStatus int
}

// Cluster is N kaas broker processes over one data dir.
type Cluster struct {
	t       testing.TB
	Bin     string
	DataDir string
	LogDir  string
	Opts    Options
	Brokers []*Broker
}

// Broker is one kaas broker process; it may be started many times, always
// with the same id and port.
type Broker struct {
	c       *Cluster
	ID      int32
	Addr    string
	LogPath string

	mu       sync.Mutex // guards the fields below
	cmd      *exec.Cmd
	done     chan struct{} // closed when cmd has exited
	exitErr  error
	signaled bool // the harness killed or signalled this run
	stopped  bool // SIGSTOPped and not yet continued
	logStart int64
	starts   int
	crashes  []string
}

// Start builds the binary, starts opts.Brokers brokers in parallel and waits
// until each logs that it serves clients. Cleanup kills every process.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c := New(t, opts)
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	return c
}

// New prepares a cluster without starting it.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Brokers <= 0 {
		opts.Brokers = 3
	}
	if opts.DeadAfter <= 0 {
		opts.DeadAfter = 3 * time.Second
	}
	if opts.ReportInterval <= 0 {
		opts.ReportInterval = time.Second
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 45 * time.Second
	}
	if opts.LogDir == "" {
		opts.LogDir = t.TempDir()
	} else if err := os.MkdirAll(opts.LogDir, 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := opts.DataDir
	if len(opts.DataDirs) > 0 && len(opts.DataDirs) != opts.Brokers {
		t.Fatalf("proctest: %d data dirs for %d brokers", len(opts.DataDirs), opts.Brokers)
	}
	if len(opts.Advertise) > 0 && len(opts.Advertise) != opts.Brokers {
		t.Fatalf("proctest: %d advertised addresses for %d brokers", len(opts.Advertise), opts.Brokers)
	}
	switch {
	case dataDir != "":
	case len(opts.DataDirs) > 0:
		dataDir = opts.DataDirs[0]
	default:
		dataDir = t.TempDir()
	}
	if opts.Ready == "" {
		opts.Ready = `"serving clients"`
	}
	c := &Cluster{t: t, DataDir: dataDir, LogDir: opts.LogDir, Opts: opts}
	if opts.Command == nil {
		c.Bin = Binary(t)
	}
	for i := range opts.Brokers {
		c.Brokers = append(c.Brokers, &Broker{
			c: c, ID: int32(i),
			Addr:    "127.0.0.1:" + strconv.Itoa(FreePort(t)),
			LogPath: filepath.Join(opts.LogDir, fmt.Sprintf("broker-%d.log", i)),
		})
	}
	t.Cleanup(c.Close)
	return c
}

// StartAll starts every broker that is not running and waits for all.
func (c *Cluster) StartAll() error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.Brokers))
	for i, b := range c.Brokers {
		if b.Running() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.Start()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Bootstrap is every broker's address, comma separated.
func (c *Cluster) Bootstrap() string { return strings.Join(c.Addrs(), ",") }

// Addrs lists every broker's address.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, b := range c.Brokers {
		out = append(out, b.Addr)
	}
	return out
}

// Broker returns the broker with node id id, or nil.
func (c *Cluster) Broker(id int32) *Broker {
	for _, b := range c.Brokers {
		if b.ID == id {
			return b
		}
	}
	return nil
}

// Client returns a franz-go client seeded with every broker, closed at
// cleanup. Extra options are appended.
func (c *Cluster) Client(opts ...kgo.Opt) *kgo.Client {
	c.t.Helper()
	all := append([]kgo.Opt{kgo.SeedBrokers(c.Addrs()...), kgo.RetryTimeout(30 * time.Second)}, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

// Controller asks the cluster (through any broker that answers) for the
// controller's node id.
func (c *Cluster) Controller(ctx context.Context, adm *kadm.Client) (int32, error) {
	m, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return -1, fmt.Errorf("proctest: metadata: %w", err)
	}
	if m.Controller < 0 {
		return -1, errors.New("proctest: no controller known")
	}
	return m.Controller, nil
}

// Coordinator finds the coordinator of a group.
func (c *Cluster) Coordinator(ctx context.Context, adm *kadm.Client, group string) (int32, error) {
	rs := adm.FindGroupCoordinators(ctx, group)
	r, ok := rs[group]
	if !ok {
		return -1, fmt.Errorf("proctest: no FindCoordinator answer for %s", group)
	}
	if r.Err != nil {
		return -1, fmt.Errorf("proctest: FindCoordinator %s: %w", group, r.Err)
	}
	return r.NodeID, nil
}

// Close kills every broker process group and waits for it to exit; it
// reports brokers that exited on their own (crashes) and, when the test
// failed, the tail of every broker's log.
func (c *Cluster) Close() {
	for _, b := range c.Brokers {
		b.kill()
	}
	for _, b := range c.Brokers {
		b.mu.Lock()
		crashes := b.crashes
		b.mu.Unlock()
		for _, cr := range crashes {
			c.t.Errorf("proctest: broker %d exited without being signalled: %s\n%s", b.ID, cr, b.Tail(40))
		}
	}
	if c.t.Failed() {
		for _, b := range c.Brokers {
			c.t.Logf("--- tail of %s ---\n%s", b.LogPath, b.Tail(25))
		}
	}
}

// Start starts the broker process and waits until it serves clients.
func (b *Broker) Start() error {
	b.mu.Lock()
	if b.cmd != nil {
		b.mu.Unlock()
		return fmt.Errorf("proctest: broker %d already running", b.ID)
	}
	o := b.c.Opts
	dir := b.c.DataDir
	if len(o.DataDirs) > 0 {
		dir = o.DataDirs[b.ID]
	}
	argv := []string{b.c.Bin, "broker", "--id", strconv.Itoa(int(b.ID)), "--data-dir", dir,
		"--listen", b.Addr, "--dead-after", o.DeadAfter.String(),
		"--report-interval", o.ReportInterval.String(), "--log-format", "json"}
	if len(o.Advertise) > 0 {
		argv = append(argv, "--advertise", o.Advertise[b.ID])
	}
	argv = append(argv, o.Args...)
	if o.Command != nil {
		argv = o.Command(b.ID)
	}
	f, err := os.OpenFile(b.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	st, _ := f.Stat()
	b.starts++
	fmt.Fprintf(f, "{\"proctest\":\"start %d of broker %d\"}\n", b.starts, b.ID)
	b.logStart = st.Size()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	if len(o.Env) > 0 {
		cmd.Env = append(os.Environ(), o.Env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		b.mu.Unlock()
		return fmt.Errorf("proctest: start broker %d: %w", b.ID, err)
	}
	done := make(chan struct{})
	b.cmd, b.done, b.exitErr, b.signaled, b.stopped = cmd, done, nil, false, false
	b.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		b.mu.Lock()
		b.exitErr = err
		if !b.signaled {
			b.crashes = append(b.crashes, fmt.Sprintf("run %d: %v", b.starts, err))
		}
		if b.cmd == cmd {
			b.cmd = nil
		}
		b.mu.Unlock()
		close(done)
	}()
	return b.WaitReady(o.ReadyTimeout)
}

// WaitReady waits until the current run has logged Options.Ready ("serving
// clients").
func (b *Broker) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		b.mu.Lock()
		start, done := b.logStart, b.done
		b.mu.Unlock()
		if done == nil {
			return fmt.Errorf("proctest: broker %d not started", b.ID)
		}
		select {
		case <-done:
			return fmt.Errorf("proctest: broker %d exited before serving\n%s", b.ID, b.Tail(30))
		default:
		}
		if data, err := os.ReadFile(b.LogPath); err == nil && int64(len(data)) > start &&
			bytes.Contains(data[start:], []byte(b.c.Opts.Ready)) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("proctest: broker %d not serving within %v\n%s", b.ID, timeout, b.Tail(30))
}

// Running reports whether the process is alive (possibly stopped).
func (b *Broker) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cmd != nil
}

// Stopped reports whether the process is frozen by SIGSTOP.
func (b *Broker) Stopped() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopped
}

// Pid is the process id of the current run, 0 when not running.
func (b *Broker) Pid() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return 0
	}
	return b.cmd.Process.Pid
}

func (b *Broker) signal(sig syscall.Signal, mark bool) (chan struct{}, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return nil, fmt.Errorf("proctest: broker %d not running", b.ID)
	}
	if mark {
		b.signaled = true
	}
	switch sig {
	case syscall.SIGSTOP:
		b.stopped = true
	case syscall.SIGCONT, syscall.SIGKILL:
		b.stopped = false
	}
	if err := syscall.Kill(-b.cmd.Process.Pid, sig); err != nil {
		return nil, fmt.Errorf("proctest: signal %v to broker %d: %w", sig, b.ID, err)
	}
	return b.done, nil
}

// Kill sends SIGKILL to the broker's process group and waits for the exit.
func (b *Broker) Kill() error {
	done, err := b.signal(syscall.SIGKILL, true)
	if err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("proctest: broker %d did not die within 10s of SIGKILL", b.ID)
	}
}

func (b *Broker) kill() {
	if done, err := b.signal(syscall.SIGKILL, true); err == nil {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	}
}

// Terminate sends SIGTERM (a drain) and waits up to timeout for the process
// to exit by itself; past it the process is killed and an error returned.
// An exit status other than 0 (or Options.TermStatus) is an error too.
func (b *Broker) Terminate(timeout time.Duration) error {
	done, err := b.signal(syscall.SIGTERM, true)
	if err != nil {
		return err
	}
	select {
	case <-done:
		b.mu.Lock()
		err := b.exitErr
		b.mu.Unlock()
		var ee *exec.ExitError
		if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == b.c.Opts.TermStatus && b.c.Opts.TermStatus != 0) {
			return fmt.Errorf("proctest: broker %d exited after SIGTERM with %v\n%s", b.ID, err, b.Tail(20))
		}
		return nil
	case <-time.After(timeout):
		b.kill()
		return fmt.Errorf("proctest: broker %d did not exit within %v of SIGTERM\n%s", b.ID, timeout, b.Tail(20))
	}
}

// Stop freezes the broker with SIGSTOP.
func (b *Broker) Stop() error { _, err := b.signal(syscall.SIGSTOP, false); return err }

// Cont resumes a frozen broker with SIGCONT.
func (b *Broker) Cont() error { _, err := b.signal(syscall.SIGCONT, false); return err }

// Restart kills the broker if it runs, then starts it again.
func (b *Broker) Restart() error {
	if b.Running() {
		if err := b.Kill(); err != nil {
			return err
		}
	}
	return b.Start()
}

// RollingRestart stops each broker in turn with SIGTERM (it must exit by
// itself within timeout), starts it again and gives the cluster pause of
// service before the next one; after, when not nil, runs at the end of each
// broker's pause.
func (c *Cluster) RollingRestart(timeout, pause time.Duration, after func(b *Broker)) error {
	for _, b := range c.Brokers {
		if err := b.Terminate(timeout); err != nil {
			return fmt.Errorf("SIGTERM of broker %d: %w", b.ID, err)
		}
		if err := b.Start(); err != nil {
			return fmt.Errorf("restart of broker %d: %w", b.ID, err)
		}
		time.Sleep(pause)
		if after != nil {
			after(b)
		}
	}
	return nil
}

// Tail returns the last n lines of the broker's log file.
func (b *Broker) Tail(n int) string {
	f, err := os.Open(b.LogPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 4*n {
			lines = append(lines[:0:0], lines[len(lines)-n:]...)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// LogContains reports whether the broker's log file (every run) contains s.
func (b *Broker) LogContains(s string) bool {
	data, err := os.ReadFile(b.LogPath)
	return err == nil && bytes.Contains(data, []byte(s))
}

// WaitFor polls cond until it returns nil or timeout passes, returning the
// last error (testutil.Poll).
func WaitFor(timeout time.Duration, cond func() error) error { return testutil.Poll(timeout, cond) }
