package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Limits are the raw limits of this machine, measured in the run that
// compares with them (docs/performance: every goal is a ratio in one run).
type Limits struct {
	Dir    string        // where the file limits were measured
	Tmpfs  bool          // Dir is on tmpfs: the fsync figures are not a disk's
	Window time.Duration // how long each limit was sampled

	// The durable small-file pattern: write a temp file, fsync it, rename
	// it over the target, fsync the directory.
	FileP50, FileP99 time.Duration // one writer
	Files1, Files8   float64       // files/s with 1 and 8 writers (8: the volume's ceiling)

	// Appending 1 KiB to a file and fsyncing it, as a partition log does.
	AppendP50          time.Duration // one writer
	Appends1, Appends8 float64       // fsynced appends/s with 1 and 8 writers (one file each)

	// A 64-byte request/response over loopback TCP on one connection.
	LoopP50 time.Duration
	LoopRPS float64 // sequential round trips per second
}

// Bounds on every limit loop, besides its time window.
const (
	maxFileOps = 100_000 // per writer
	maxLoopOps = 2_000_000
	smallFile  = 1024 // bytes written per file or append
)

// MeasureLimits measures every raw limit, each for about window, using dir
// (created, and removed afterwards) for the file limits.
func MeasureLimits(ctx context.Context, dir string, window time.Duration) (*Limits, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: limits dir: %w", err)
	}
	defer os.RemoveAll(dir)
	l := &Limits{Dir: dir, Tmpfs: IsTmpfs(dir), Window: window}

	lat, rate, err := fileLimit(ctx, dir, 1, window, writeRenameSync)
	if err != nil {
		return nil, err
	}
	l.FileP50, l.FileP99, l.Files1 = percentile(lat, 0.50), percentile(lat, 0.99), rate
	if _, l.Files8, err = fileLimit(ctx, dir, 8, window, writeRenameSync); err != nil {
		return nil, err
	}
	if lat, l.Appends1, err = fileLimit(ctx, dir, 1, window, appendSync); err != nil {
		return nil, err
	}
	l.AppendP50 = percentile(lat, 0.50)
	if _, l.Appends8, err = fileLimit(ctx, dir, 8, window, appendSync); err != nil {
		return nil, err
	}
	if lat, l.LoopRPS, err = loopback(ctx, window); err != nil {
		return nil, err
	}
	l.LoopP50 = percentile(lat, 0.50)
	return l, nil
}

// fileOp is one durable operation of one writer; state is the writer's own.
type fileOp func(dir string, writer int, state *os.File, data []byte) (*os.File, error)

// writeRenameSync is the durable small-file pattern.
func writeRenameSync(dir string, writer int, _ *os.File, data []byte) (*os.File, error) {
	final := filepath.Join(dir, fmt.Sprintf("file-%d", writer))
	tmp := filepath.Join(dir, fmt.Sprintf(".file-%d.tmp", writer))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return nil, err
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return nil, d.Sync()
}

// appendSync appends data to the writer's own file and fsyncs it.
func appendSync(dir string, writer int, f *os.File, data []byte) (*os.File, error) {
	if f == nil {
		var err error
		f, err = os.OpenFile(filepath.Join(dir, fmt.Sprintf("log-%d", writer)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
	}
	if _, err := f.Write(data); err != nil {
		return f, err
	}
	return f, f.Sync()
}

// fileLimit runs op from writers goroutines for window (at most maxFileOps
// each) and returns every operation's latency and the total operations/s.
func fileLimit(ctx context.Context, dir string, writers int, window time.Duration, op fileOp) ([]time.Duration, float64, error) {
	data := make([]byte, smallFile)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	var (
		mu    sync.Mutex // guards all, firstErr
		all   []time.Duration
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(window)
	for w := range writers {
		wg.Go(func() {
			var f *os.File
			lat := make([]time.Duration, 0, 1024)
			var err error
			for i := 0; i < maxFileOps && ctx.Err() == nil && time.Now().Before(deadline); i++ {
				t0 := time.Now()
				if f, err = op(dir, w, f, data); err != nil {
					break
				}
				lat = append(lat, time.Since(t0))
			}
			if f != nil {
				f.Close()
			}
			mu.Lock()
			all = append(all, lat...)
			if err != nil && first == nil {
				first = fmt.Errorf("bench: file limit in %s: %w", dir, err)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return nil, 0, first
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	if len(all) == 0 {
		return nil, 0, errors.New("bench: file limit: no operation completed")
	}
	// Leave the directory empty for the next measurement.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		os.Remove(filepath.Join(dir, e.Name()))
	}
	return all, float64(len(all)) / elapsed.Seconds(), nil
}

// loopback measures sequential 64-byte round trips to a TCP echo on
// 127.0.0.1 over one connection.
func loopback(ctx context.Context, window time.Duration) ([]time.Duration, float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, 0, fmt.Errorf("bench: loopback: %w", err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() { // the echo; ends when the client closes its connection
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, 0, fmt.Errorf("bench: loopback: %w", err)
	}
	start := time.Now()
	deadline := start.Add(window)
	c.SetDeadline(deadline.Add(5 * time.Second))
	req, resp := make([]byte, 64), make([]byte, 64)
	lat := make([]time.Duration, 0, 1<<16)
	for i := 0; i < maxLoopOps && ctx.Err() == nil && time.Now().Before(deadline); i++ {
		t0 := time.Now()
		if _, err = c.Write(req); err != nil {
			break
		}
		if _, err = io.ReadFull(c, resp); err != nil {
			break
		}
		lat = append(lat, time.Since(t0))
	}
	elapsed := time.Since(start)
	c.Close()
	<-done
	if err != nil {
		return nil, 0, fmt.Errorf("bench: loopback: %w", err)
	}
	if len(lat) == 0 {
		return nil, 0, errors.New("bench: loopback: no round trip completed")
	}
	return lat, float64(len(lat)) / elapsed.Seconds(), nil
}

// percentile returns the q-quantile (0..1) of lat; lat is sorted in place.
func percentile(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	i := int(q * float64(len(lat)-1))
	return lat[i]
}
