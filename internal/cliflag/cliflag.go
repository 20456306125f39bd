// Package cliflag holds what kaas's commands share on their command line,
// on top of kong: every flag also reads a KAAS_* environment variable, a
// duration without a unit names the fix, the version string, and the
// logging flags.
package cliflag

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"
)

// EnvPrefix: a flag's environment variable is KAAS_ and its name in upper
// case with '-' as '_': --data-dir reads KAAS_DATA_DIR.
const EnvPrefix = "KAAS"

// EnvName is the environment variable of a flag: data-dir → KAAS_DATA_DIR.
func EnvName(flagName string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Options are the kong options every kaas command line uses.
func Options(name, description string, extra ...kong.Option) []kong.Option {
	return append([]kong.Option{
		kong.Name(name),
		kong.Description(description),
		kong.DefaultEnvars(EnvPrefix),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.Vars{"version": Version()},
		kong.TypeMapper(reflect.TypeFor[time.Duration](), kong.MapperFunc(decodeDuration)),
	}, extra...)
}

// Parse parses args into cli (a kong grammar) with Options. A bad command
// line prints the error and where to find the flags, and exits 2; -h and
// --version print and exit 0.
func Parse(cli any, name, description string, args []string, extra ...kong.Option) *kong.Context {
	parser, err := kong.New(cli, Options(name, description, extra...)...)
	if err != nil {
		panic(err) // the grammar itself is wrong: a programming error
	}
	ctx, err := parser.Parse(args)
	if err != nil {
		help := name + " --help"
		var pe *kong.ParseError
		if errors.As(err, &pe) && pe.Context != nil && pe.Context.Command() != "" {
			help = name + " " + strings.Fields(pe.Context.Command())[0] + " --help"
		}
		fmt.Fprintf(os.Stderr, "%s: %v\nRun '%s' for the flags.\n", name, err, help)
		os.Exit(2)
	}
	return ctx
}

// decodeDuration parses a duration as Go writes them (3s, 250ms, 1h30m);
// a bare number is refused with the fix: 3 → use 3s.
func decodeDuration(ctx *kong.DecodeContext, target reflect.Value) error {
	var s string
	if err := ctx.Scan.PopValueInto("duration", &s); err != nil {
		return err
	}
	d, err := ParseDuration(s)
	if err != nil {
		return err
	}
	target.SetInt(int64(d))
	return nil
}

// ParseDuration is time.ParseDuration whose error for a number without a
// unit says which unit to add.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	if _, nerr := strconv.ParseFloat(s, 64); nerr == nil && s != "0" {
		return 0, fmt.Errorf("%q has no unit: use %ss (or ms, m, h)", s, s)
	}
	return 0, fmt.Errorf("%q is not a duration: write it as 3s, 250ms, 10m or 1h30m", s)
}

// Version is the binary's version: the module version and, for a build from
// a checkout, the commit and whether the tree was modified.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "kaas (unknown build)"
	}
	v := bi.Main.Version
	var rev, when string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	out := "kaas " + v
	if rev != "" {
		out += " commit " + rev[:min(len(rev), 12)]
		if dirty {
			out += " (modified)"
		}
		if when != "" {
			out += " " + when
		}
	}
	return out + " " + bi.GoVersion
}

// Log is the logging flags: --log-format and --log-level.
type Log struct {
	LogFormat string `name:"log-format" enum:"text,json" default:"text" help:"Log format: text or json."`
	LogLevel  string `name:"log-level" enum:"debug,info,warn,error" default:"info" help:"Log level: debug, info, warn or error."`
}

// Logger builds the logger the flags describe, writing to standard error.
func (l *Log) Logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.LogLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch l.LogFormat {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", l.LogFormat)
}
