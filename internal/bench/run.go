package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Config configures one `kaas-bench` run.
type Config struct {
	Goals       []string      // goal names; empty runs every registered goal
	Duration    time.Duration // per throughput measurement; default 5 s
	Concurrency []int         // default 1, 8, 64
	// DataDir is a directory on the volume under test; the run works in a
	// fresh directory inside it and removes it at the end. Default: the
	// system temp dir.
	DataDir string
	NoTmpfs bool // skip the kaas-on-tmpfs target
	// Kafka is the bootstrap of an Apache Kafka cluster (the reference of
	// scripts/kafka-reference.sh) measured beside kaas where the rows
	// compare like with like; empty: no Kafka column.
	Kafka []string
	Log   *slog.Logger
}

// Machine describes where a run happened.
type Machine struct {
	NumCPU     int
	GOMAXPROCS int
	GoVersion  string
	OS, Arch   string
	Date       time.Time
	DataDir    string
	DataTmpfs  bool
	DataFS     string // the data dir's file system type (FSType), "" unknown
	TmpfsKaas  bool   // the kaas-tmpfs target ran
	Kfake      string // kfake's module version
	Kafka      string // the Kafka cluster of the run (Env.KafkaDesc), "" without one
	Duration   time.Duration
	Concurr    []int
}

// Report is the outcome of a run.
type Report struct {
	Machine Machine
	Goals   []Goal
	Rows    []Row
	Errors  []string // one per goal that failed; the other goals still ran
	Took    time.Duration
	// Beside is a second run, of the goals bound to the data dir, on
	// another volume (kaas-bench --compare-data-dir): its rows are reported
	// next to this run's.
	Beside *Report
}

// VolumeGoals are the goals whose figures depend on the data dir's volume:
// the raw limits, durable produce and durable commit.
var VolumeGoals = []string{"limits", "produce", "commit"}

// Run runs the selected goals in one process against one set of targets.
// A goal that fails is reported in Report.Errors; Run fails only when the
// run cannot start.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	var goals []Goal
	if len(cfg.Goals) == 0 {
		goals = Goals()
	} else {
		for _, name := range cfg.Goals {
			g, ok := Lookup(name)
			if !ok {
				return nil, fmt.Errorf("bench: unknown goal %q (have %s)", name, strings.Join(GoalNames(), ", "))
			}
			goals = append(goals, g)
		}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("bench: data dir: %w", err)
		}
	}
	dir, err := os.MkdirTemp(cfg.DataDir, "kaas-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: data dir: %w", err)
	}
	defer os.RemoveAll(dir)

	start := time.Now()
	env, err := NewEnv(ctx, EnvConfig{DataDir: dir, Duration: cfg.Duration, Concurrency: cfg.Concurrency,
		Log: cfg.Log, NoTmpfs: cfg.NoTmpfs, Kafka: cfg.Kafka})
	if err != nil {
		return nil, err
	}
	defer env.Close()
	rep := &Report{Goals: goals, Machine: Machine{
		NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(),
		OS: runtime.GOOS, Arch: runtime.GOARCH, Date: start.UTC(),
		DataDir: dir, DataTmpfs: IsTmpfs(dir), DataFS: FSType(dir), TmpfsKaas: env.KaasMem != nil,
		Kfake: moduleVersion("github.com/twmb/franz-go/pkg/kfake"), Kafka: env.KafkaDesc,
		Duration: env.Duration, Concurr: env.Concurrency,
	}}
	for _, g := range goals {
		cfg.Log.Info("bench goal", "goal", g.Name())
		rows, err := g.Run(ctx, env)
		rep.Rows = append(rep.Rows, rows...)
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %v", g.Name(), err))
			if errors.Is(err, context.Canceled) || ctx.Err() != nil {
				break
			}
		}
	}
	rep.Took = time.Since(start)
	return rep, nil
}

// GoalNames lists the registered goals' names in run order.
func GoalNames() []string {
	var names []string
	for _, g := range Goals() {
		names = append(names, g.Name())
	}
	return names
}

func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			return d.Version
		}
	}
	return "unknown"
}
