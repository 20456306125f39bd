package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBrokerBinaryLinksNoBenchmark: the broker binary links neither kfake
// nor the plotting library nor the benchmark (they live in cmd/kaas-bench).
func TestBrokerBinaryLinksNoBenchmark(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/twmb/franz-go/pkg/kfake", "gonum.org/v1/plot", "github.com/kaas-dev/kaas/internal/bench"} {
			if pkg == banned || strings.HasPrefix(pkg, banned+"/") {
				t.Errorf("cmd/kaas depends on %s", pkg)
			}
		}
	}
}
