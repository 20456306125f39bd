package bench

import (
	"context"
	"log/slog"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// TestOwnershipScaleSmall runs the ownership-scale goal at a small scale on
// a bare Env (no targets) and checks its rows and that it cleans up.
func TestOwnershipScaleSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dataDir := t.TempDir()
	env := &Env{DataDir: dataDir, Duration: 2 * time.Second, Log: slog.New(slog.DiscardHandler)}
	defer env.Close()
	g := ownershipGoal{groups: 200, files: 1000, writes: 3}
	rows, err := g.Run(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3: %+v", len(rows), rows)
	}
	for i, r := range rows {
		if r.Goal != g.Name() || r.What == "" || r.Unit == "" || r.RefName != RefL {
			t.Errorf("row %d: %+v", i+1, r)
		}
		for name, v := range map[string]float64{"ours": r.Ours, "reference": r.Reference, "ratio": r.Ratio} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
				t.Errorf("row %d %q: %s = %v", i+1, r.What, name, v)
			}
		}
		if _, ok := bound(r.Target); !ok && r.Target != "info" {
			t.Errorf("row %d %q: target %q", i+1, r.What, r.Target)
		}
		t.Logf("%s: %s %s vs %s %s (%s) — %s", r.What, num(r.Ours), r.Unit, num(r.Reference), r.RefName, r.Target, r.Note)
	}
	if !strings.Contains(rows[0].What, "200 groups") || !strings.Contains(rows[2].What, "1000 group files") {
		t.Errorf("rows do not name the scale: %q, %q", rows[0].What, rows[2].What)
	}
	if rows[0].Ours < 200*20 { // each entry is at least {"groupId":"bench-own-00000",...}
		t.Errorf("assignment.json of %v bytes for 200 groups", rows[0].Ours)
	}
	ents, err := os.ReadDir(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("left behind in the data dir: %v", ents)
	}
}
