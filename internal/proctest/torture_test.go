package proctest

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The bounds the torture test holds a broker process to.
const (
	tortureMaxRSS = 256 << 20 // bytes
	tortureMaxFDs = 600       // max.connections (300) + files + listener
)

// TestTortureBrokerStaysUp attacks one broker process, for a bounded time,
// with what took brokers down before (issue 12): connection floods past
// max.connections and max.connections.per.ip, half size prefixes and
// truncated frames, slowloris (a byte at a time), and 1,000 size prefixes
// announcing 100 MiB each. Attackers use other loopback addresses
// (127.0.0.2-127.0.0.40) than the well-behaved clients (127.0.0.1): an
// idempotent acks=all producer and a consumer group that commits. The broker
// must stay up with its RSS under 256 MB and under 600 descriptors, and the
// well-behaved clients must see no error and keep making progress.
func TestTortureBrokerStaysUp(t *testing.T) {
	c := Start(t, Options{Brokers: 1, Args: []string{
		"--max-connections", "300", "--max-connections-per-ip", "64",
		"--request-read-timeout", "2s", "--connections-max-idle", "20s"}})
	b := c.Brokers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic, parts = "torture", 3
	adm := kadm.NewClient(c.Client())
	defer adm.Close()
	if _, err := adm.CreateTopic(ctx, parts, 1, nil, topic); err != nil {
		t.Fatal(err)
	}

	// The well-behaved clients, connected before the attack.
	var clientErrs atomic.Int64
	var firstErr atomic.Value
	noteErr := func(what string, err error) {
		if clientErrs.Add(1) == 1 {
			firstErr.Store(fmt.Sprintf("%s: %v", what, err))
		}
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.ConsumeTopics(topic), kgo.ConsumerGroup("torture-group"),
		kgo.DisableAutoCommit(), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var produced, consumed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // produce until stopped, one record every 2 ms
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
			err := prod.ProduceSync(rctx, &kgo.Record{Value: []byte(strconv.Itoa(i))}).FirstErr()
			rcancel()
			if err != nil {
				noteErr("produce", err)
				continue
			}
			produced.Add(1)
		}
	}()
	go func() { // consume and commit until stopped
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			fs := cons.PollFetches(pctx)
			pcancel()
			fs.EachError(func(tp string, p int32, err error) {
				if pctx.Err() == nil {
					noteErr(fmt.Sprintf("fetch %s/%d", tp, p), err)
				}
			})
			consumed.Add(int64(fs.NumRecords()))
			if fs.NumRecords() > 0 {
				cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
				if err := cons.CommitUncommittedOffsets(cctx); err != nil {
					noteErr("commit", err)
				}
				ccancel()
			}
		}
	}()
	if err := WaitFor(30*time.Second, func() error {
		if consumed.Load() < 50 {
			return fmt.Errorf("consumed %d", consumed.Load())
		}
		return nil
	}); err != nil {
		t.Fatalf("well-behaved clients before the attack: %v", err)
	}

	// Watch the broker's RSS and descriptors while it is attacked.
	var maxRSS, maxFDs atomic.Int64
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			if rss, fds, err := procUsage(b.Pid()); err == nil {
				maxInt64(&maxRSS, rss)
				maxInt64(&maxFDs, fds)
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()

	before := produced.Load()
	attackStart := time.Now()
	attack(t, b.Addr)
	t.Logf("attack took %v", time.Since(attackStart).Round(100*time.Millisecond))
	// The clients keep making progress afterwards.
	if err := WaitFor(20*time.Second, func() error {
		if produced.Load() < before+200 {
			return fmt.Errorf("produced %d since the attack began", produced.Load()-before)
		}
		return nil
	}); err != nil {
		t.Errorf("producer after the attack: %v", err)
	}
	close(stop)
	wg.Wait()
	<-watchDone
	if !b.Running() {
		t.Fatal("the broker process exited under the attack")
	}
	t.Logf("broker peak RSS %d MiB, peak descriptors %d; produced %d, consumed %d",
		maxRSS.Load()>>20, maxFDs.Load(), produced.Load(), consumed.Load())
	if maxRSS.Load() > tortureMaxRSS {
		t.Errorf("broker RSS peaked at %d MiB (bound %d MiB)", maxRSS.Load()>>20, tortureMaxRSS>>20)
	}
	if maxFDs.Load() > tortureMaxFDs {
		t.Errorf("broker descriptors peaked at %d (bound %d)", maxFDs.Load(), tortureMaxFDs)
	}
	if n := clientErrs.Load(); n > 0 {
		t.Errorf("well-behaved clients saw %d errors; first: %v", n, firstErr.Load())
	}
}

// attack runs the four attacks at once and returns when they are over
// (each bounded in count and time). Attackers use 127.0.0.2 and up.
func attack(t *testing.T, addr string) {
	var wg sync.WaitGroup
	run := func(name string, fn func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			fn()
			t.Logf("%s done in %v", name, time.Since(start).Round(100*time.Millisecond))
		}()
	}
	dial := func(src int) net.Conn {
		d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(src))}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return nil
		}
		return c
	}
	// 1. A flood: 2,000 connections from 8 addresses (64 each are admitted
	// per address, then max.connections stops the rest), held 3 s.
	run("connection flood", func() {
		var conns []net.Conn
		for i := range 2000 {
			if c := dial(2 + i%8); c != nil {
				conns = append(conns, c)
			}
		}
		time.Sleep(3 * time.Second)
		for _, c := range conns {
			c.Close()
		}
	})
	// 2. Half size prefixes and truncated frames, left hanging.
	run("partial frames", func() {
		var conns []net.Conn
		for i := range 100 {
			c := dial(10 + i%4)
			if c == nil {
				continue
			}
			if i%2 == 0 {
				c.Write([]byte{0, 0})
			} else {
				c.Write([]byte{0, 0, 0, 64, 0, 18, 0, 3, 0, 0})
			}
			conns = append(conns, c)
		}
		time.Sleep(4 * time.Second)
		for _, c := range conns {
			c.Close()
		}
	})
	// 3. Slowloris: 40 connections sending a 1 KiB request a byte every
	// 100 ms, for at most 6 s.
	run("slowloris", func() {
		var inner sync.WaitGroup
		for i := range 40 {
			inner.Add(1)
			go func() {
				defer inner.Done()
				c := dial(14 + i%2)
				if c == nil {
					return
				}
				defer c.Close()
				c.Write([]byte{0, 0, 4, 0})
				for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline); {
					time.Sleep(100 * time.Millisecond)
					if _, err := c.Write([]byte{1}); err != nil {
						return
					}
				}
			}()
		}
		inner.Wait()
	})
	// 4. 1,000 size prefixes of 100 MiB from 25 addresses, 40 at a time,
	// each connection closed after its prefix.
	run("huge size prefixes", func() {
		var prefix [4]byte
		binary.BigEndian.PutUint32(prefix[:], 100<<20)
		for i := 0; i < 1000; i += 40 {
			var inner sync.WaitGroup
			for j := range 40 {
				inner.Add(1)
				go func() {
					defer inner.Done()
					c := dial(16 + (i+j)%25)
					if c == nil {
						return
					}
					c.Write(prefix[:])
					time.Sleep(50 * time.Millisecond)
					c.Close()
				}()
			}
			inner.Wait()
		}
	})
	wg.Wait()
}

// procUsage reads a process's resident set size (bytes) and open
// descriptors.
func procUsage(pid int) (rss, fds int64, err error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			rss = kb << 10
		}
	}
	ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		return 0, 0, err
	}
	return rss, int64(len(ents)), nil
}

func maxInt64(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}
