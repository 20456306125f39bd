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

	"github.com/alecthomas/kong"

	"github.com/kaas-dev/kaas/internal/bench"
	"github.com/kaas-dev/kaas/internal/cliflag"
)

// benchCmd is `kaas-bench`: flags → bench.Config → bench.Run, then the
// table to stdout and the report files to --out. Every flag also reads
// KAAS_<FLAG>.
type benchCmd struct {
	Version     kong.VersionFlag `env:"-" help:"Print the version and exit."`
	Goals       string           `name:"goals" help:"Comma-separated goals to run (default all: ${goals})."`
	Duration    time.Duration    `name:"duration" default:"5s" help:"How long each throughput measurement runs."`
	Concurrency string           `name:"concurrency" default:"1,8,64" help:"Comma-separated producer counts."`
	Out         string           `name:"out" default:"docs/bench" help:"Directory for REPORT.md and bench.png (empty: none)."`
	DataDir     string           `name:"data-dir" help:"A directory on the volume under test (default: the system temp dir)."`
	CompareDir  string           `name:"compare-data-dir" help:"A directory on a second volume: the goals bound to the data dir (${volumegoals}) run there too, reported beside."`
	NoTmpfs     bool             `name:"no-tmpfs" help:"Skip the kaas-on-tmpfs target."`
	Kafka       string           `name:"kafka" help:"Comma-separated bootstrap addresses (loopback) of an Apache Kafka cluster, such as the reference of scripts/kafka-reference.sh: measured beside kaas, the report's Kafka column."`
	CPUProfile  string           `name:"cpuprofile" help:"Write a CPU profile of the whole run to this file (go tool pprof)."`
	cliflag.Log `embed:""`
}

func main() {
	var c benchCmd
	cliflag.Parse(&c, "kaas-bench", "Every performance goal of docs/bench/README.md as a ratio against kfake or the raw limits, in one run.",
		os.Args[1:], kong.Vars{"goals": strings.Join(bench.GoalNames(), ","), "volumegoals": strings.Join(bench.VolumeGoals, ",")})
	if err := c.run(); err != nil {
		fmt.Fprintln(os.Stderr, "kaas-bench:", err)
		os.Exit(1)
	}
}

func (c *benchCmd) run() error {
	goals, concurrency, out, dataDir, compareDir, cpuProfile, duration, noTmpfs :=
		c.Goals, c.Concurrency, c.Out, c.DataDir, c.CompareDir, c.CPUProfile, c.Duration, c.NoTmpfs
	log, err := c.Logger()
	if err != nil {
		return err
	}
	cfg := bench.Config{Duration: duration, DataDir: dataDir, NoTmpfs: noTmpfs, Log: log}
	if c.Kafka != "" {
		if cfg.Kafka, err = bench.LoopbackAddrs(c.Kafka); err != nil {
			return fmt.Errorf("--kafka: %w", err)
		}
	}
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
		second.DataDir, second.NoTmpfs, second.Goals, second.Kafka = compareDir, true, nil, nil
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
