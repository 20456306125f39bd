// Package cliflag holds what kaas's commands share on their command line:
// flag sets whose flags also read KAAS_* environment variables, and the
// logging flags. It imports the standard library only.
package cliflag

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// Set is a FlagSet whose flags default to KAAS_* environment variables when
// set: KAAS_ and the flag's name in upper case with '-' as '_'.
type Set struct {
	*flag.FlagSet
}

// New returns an empty Set for a command.
func New(name string) Set { return Set{flag.NewFlagSet(name, flag.ContinueOnError)} }

// EnvName is the environment variable of a flag: data-dir → KAAS_DATA_DIR.
func EnvName(flagName string) string {
	return "KAAS_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse applies the environment first, then the command line.
func (s Set) Parse(args []string) error {
	var envErr error
	s.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv(EnvName(f.Name)); ok && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", EnvName(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		return envErr
	}
	return s.FlagSet.Parse(args)
}

// Log is the logging flags: --log-format and --log-level.
type Log struct {
	Format, Level string
}

// Register adds the logging flags to s.
func (l *Log) Register(s Set) {
	s.StringVar(&l.Format, "log-format", "text", "log format: text or json")
	s.StringVar(&l.Level, "log-level", "info", "log level: debug, info, warn, error")
}

// Logger builds the logger the flags describe, writing to standard error.
func (l *Log) Logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.Level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch l.Format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", l.Format)
}
