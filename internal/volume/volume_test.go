package volume

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOnlyVolumeBuildsVolumePaths greps the product code of the repository
// (no test files) for the names of the volume's layout: only this package
// may spell them. Names with no other meaning may not appear anywhere; the
// folder names that are also ordinary words (or, for __consumer_offsets,
// Kafka's topic name) may not appear in a line that joins a path.
func TestOnlyVolumeBuildsVolumePaths(t *testing.T) {
	names := []string{`"__cluster"`, `"assignment.json"`, `"cluster.json"`, `"kaas-%d"`, `"kaas-" +`}
	inPaths := []string{`"__consumer_offsets"`, `"producer-ids"`, `"removals"`, `"transactions"`,
		`"deleted"`, `"brokers"`, `"controller"`, `"topics"`}
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "volume" || strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			for _, n := range names {
				if strings.Contains(line, n) {
					t.Errorf("%s:%d spells %s: use internal/volume", path, i+1, n)
				}
			}
			if strings.Contains(line, "Join(") {
				for _, n := range inPaths {
					if strings.Contains(line, n) {
						t.Errorf("%s:%d joins a path with %s: use internal/volume", path, i+1, n)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestBrokerNames(t *testing.T) {
	for _, n := range []int32{0, 7, 11, 2147483647} {
		if got, ok := ParseBrokerName(BrokerName(n)); !ok || got != n {
			t.Fatalf("%d → %s → %d %v", n, BrokerName(n), got, ok)
		}
	}
	for _, bad := range []string{"kaas-", "kaas-01", "kaas--1", "broker-1", "kaas-x", "kaas-99999999999"} {
		if _, ok := ParseBrokerName(bad); ok {
			t.Fatalf("%q parsed", bad)
		}
	}
}
