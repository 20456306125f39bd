// Command kaas-bench runs the benchmark goals of docs/bench/README.md: kaas
// (on the data dir and on tmpfs) against kfake and the raw limits of the
// machine, in one run, and writes docs/bench/REPORT.md and bench.png. It is
// its own binary so that the broker links neither kfake nor the plotting
// library.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kaas-dev/kaas/internal/bench"
	"github.com/kaas-dev/kaas/internal/cliflag"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kaas-bench:", err)
		os.Exit(1)
	}
}

// run is `kaas-bench`: flags → bench.Config → bench.Run, then the table to
// stdout and the report files to --out. Every flag also reads KAAS_<FLAG>.
func run(args []string) error {
	fs := cliflag.New("kaas-bench")
	var (
		goals, concurrency, out, dataDir string
		compareDir                       string
		cpuProfile                       string
		duration                         time.Duration
		noTmpfs                          bool
		logFlags                         cliflag.Log
	)
	fs.StringVar(&goals, "goals", "", "comma-separated goals to run (default all: "+strings.Join(bench.GoalNames(), ",")+")")
	fs.DurationVar(&duration, "duration", 5*time.Second, "how long each throughput measurement runs")
	fs.StringVar(&concurrency, "concurrency", "1,8,64", "comma-separated producer counts")
	fs.StringVar(&out, "out", "docs/bench", "directory for REPORT.md and bench.png (empty: none)")
	fs.StringVar(&dataDir, "data-dir", "", "a directory on the volume under test (default: the system temp dir)")
	fs.StringVar(&compareDir, "compare-data-dir", "", "a directory on a second volume: the goals bound to the data dir ("+strings.Join(bench.VolumeGoals, ",")+") run there too, reported beside")
	fs.BoolVar(&noTmpfs, "no-tmpfs", false, "skip the kaas-on-tmpfs target")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	logFlags.Register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := logFlags.Logger()
	if err != nil {
		return err
	}
	cfg := bench.Config{Duration: duration, DataDir: dataDir, NoTmpfs: noTmpfs, Log: log}
	if goals != "" {
		cfg.Goals = strings.Split(goals, ",")
	}
	for _, s := range strings.Split(concurrency, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 1024 {
			return fmt.Errorf("--concurrency: %q is not a count in 1..1024", s)
		}
		cfg.Concurrency = append(cfg.Concurrency, n)
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if err := rep.WriteTable(os.Stdout); err != nil {
		return err
	}
	if compareDir != "" {
		second := cfg
		second.DataDir, second.NoTmpfs, second.Goals = compareDir, true, nil
		for _, g := range bench.VolumeGoals {
			if len(cfg.Goals) == 0 || slices.Contains(cfg.Goals, g) {
				second.Goals = append(second.Goals, g)
			}
		}
		if len(second.Goals) == 0 {
			return fmt.Errorf("--compare-data-dir: none of %s among --goals", strings.Join(bench.VolumeGoals, ","))
		}
		log.Info("bench: the volume goals on the second data dir", "dir", compareDir, "goals", second.Goals)
		if rep.Beside, err = bench.Run(ctx, second); err != nil {
			return err
		}
		fmt.Printf("\non %s:\n", compareDir)
		if err := rep.Beside.WriteTable(os.Stdout); err != nil {
			return err
		}
	}
	if out != "" {
		if err := rep.WriteFiles(out); err != nil {
			return err
		}
		fmt.Printf("report: %s/REPORT.md, chart: %s/bench.png\n", out, out)
	}
	if n := len(rep.Errors) + len(besideErrors(rep)); n > 0 {
		return fmt.Errorf("bench: %d goal(s) failed", n)
	}
	return nil
}

func besideErrors(rep *bench.Report) []string {
	if rep.Beside == nil {
		return nil
	}
	return rep.Beside.Errors
}
