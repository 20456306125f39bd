package offsets

import (
	"path/filepath"
	"strings"
	"testing"
)

func checkName(t *testing.T, group string) string {
	t.Helper()
	name := FileName(group)
	if name == "" || len(name) > 255 || strings.ContainsAny(name, "/\\\x00") ||
		strings.HasPrefix(name, ".") || name != strings.ToLower(name) || !strings.HasSuffix(name, ".json") {
		t.Fatalf("FileName(%q) = %q: not a safe name", group, name)
	}
	dir := "/data/__cluster/__consumer_offsets"
	if got := filepath.Dir(filepath.Join(dir, name)); got != dir {
		t.Fatalf("FileName(%q) = %q escapes the directory to %s", group, name, got)
	}
	if back, ok := GroupFromFileName(name); ok {
		if back != group {
			t.Fatalf("GroupFromFileName(FileName(%q)) = %q", group, back)
		}
	} else if !strings.Contains(name, hashMarker) {
		t.Fatalf("FileName(%q) = %q does not decode", group, name)
	}
	return name
}

// TestTrap5GroupIDEscapesOrCollides: spec §8 trap 5, a group id such as
// ../assignment overwrites cluster state.
func TestTrap5GroupIDEscapesOrCollides(t *testing.T) {
	long := strings.Repeat("x", 300)
	ids := []string{
		"../assignment", "../assignment.json", "a/b", "a%2fb", "a%2Fb", "..", ".", "", "\x00", "a\x00b",
		long, long + "y", strings.Repeat("/", 300), strings.Repeat("ä", 150), strings.Repeat("A", 199),
		"Group", "group", "GROUP", "g%", "%", "%-", "g.json", ".tmp-1", "-", "_", "a b", "a\\b",
		"my-group", "console-consumer-1", strings.Repeat("a", 200), strings.Repeat("a", 201),
		strings.Repeat("A", 66) + "x", strings.Repeat("A", 67),
	}
	seen := map[string]string{}
	for _, id := range ids {
		name := checkName(t, id)
		if prev, dup := seen[strings.ToLower(name)]; dup {
			t.Fatalf("FileName(%q) = FileName(%q) = %q", id, prev, name)
		}
		seen[strings.ToLower(name)] = id
	}
	for _, safe := range []string{"my-group", "console-consumer-1", "g1", "a.b_c"} {
		if FileName(safe) != safe+".json" {
			t.Errorf("safe id %q not kept as is: %q", safe, FileName(safe))
		}
	}
	for _, bad := range []string{"x.json.tmp", ".tmp-1", "%2e.json", "%4D.json", "%4.json", "A.json", "a/b.json", "%zz.json", "x", ".json"} {
		if g, ok := GroupFromFileName(bad); ok && FileName(g) != bad {
			t.Errorf("GroupFromFileName(%q) = %q, which FileName maps to %q", bad, g, FileName(g))
		}
	}
}

func FuzzFileName(f *testing.F) {
	for _, s := range []string{"", ".", "..", "../assignment", "a/b", "\x00", "Ab", "%41", strings.Repeat("%", 70)} {
		f.Add(s, "x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		na := checkName(t, a)
		nb := checkName(t, b)
		if a != b && strings.EqualFold(na, nb) {
			t.Fatalf("collision: %q and %q both map to %q", a, b, na)
		}
		if g, ok := GroupFromFileName(a); ok && FileName(g) != a {
			t.Fatalf("GroupFromFileName(%q) = %q, but FileName of it is %q", a, g, FileName(g))
		}
	})
}
