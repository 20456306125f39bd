package route

import (
	"bufio"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

func brokers(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("kaas-%d", i)
	}
	return ids
}

func allAlive(string) bool { return true }

func deadSet(dead ...string) func(string) bool {
	return func(id string) bool {
		for _, d := range dead {
			if id == d {
				return false
			}
		}
		return true
	}
}

func TestFNV1a32SpecVectors(t *testing.T) {
	for key, want := range map[string]uint32{
		"":                   0x811c9dc5,
		"a":                  0xe40c292c,
		"foobar":             0xbf9cf968,
		"g1":                 0x10202895,
		"my-group":           0x0f4aea0d,
		"group-x":            0x36c7a651,
		"console-consumer-1": 0xdae7dc27,
	} {
		if got := FNV1a32(key); got != want {
			t.Errorf("FNV1a32(%q) = %#08x, want %#08x", key, got, want)
		}
		if got := fnv1a32(key); got != want {
			t.Errorf("fnv1a32(%q) = %#08x, want %#08x", key, got, want)
		}
	}
}

func TestFNVTwinsAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if FNV1a32(string(b)) != fnv1a32(string(b)) {
			t.Fatalf("twins disagree on %q", b)
		}
		h := fnv.New64a()
		h.Write(b)
		h.Write([]byte{0})
		h.Write([]byte("kaas-3"))
		z := h.Sum64()
		z ^= z >> 30
		z *= 0xbf58476d1ce4e5b9
		z ^= z >> 27
		z *= 0x94d049bb133111eb
		z ^= z >> 31
		if got := Weight(string(b), "kaas-3"); got != z {
			t.Fatalf("Weight(%q) = %#x, want %#x", b, got, z)
		}
	}
}

func TestSpecPlacements(t *testing.T) {
	for _, c := range []struct {
		key  string
		n    int
		want string
	}{
		{"g1", 3, "kaas-0"},
		{"foobar", 3, "kaas-1"},
		{"group-x", 3, "kaas-2"},
		{"g1", 12, "kaas-7"}, // slot 9 of the string-sorted set, not kaas-9
	} {
		if got := Preferred(c.key, brokers(c.n)); got != c.want {
			t.Errorf("Preferred(%q, kaas-0..%d) = %s, want %s", c.key, c.n-1, got, c.want)
		}
		got, ok := Coordinator(c.key, brokers(c.n), allAlive)
		if !ok || got != c.want {
			t.Errorf("Coordinator(%q, kaas-0..%d) = %s %v, want %s", c.key, c.n-1, got, ok, c.want)
		}
	}
}

func TestNoBroker(t *testing.T) {
	if id, ok := Coordinator("g1", nil, allAlive); ok || id != "" {
		t.Fatalf("empty set: got %q %v", id, ok)
	}
	if id, ok := Coordinator("g1", brokers(3), func(string) bool { return false }); ok || id != "" {
		t.Fatalf("none alive: got %q %v", id, ok)
	}
	if p := Preferred("g1", nil); p != "" {
		t.Fatalf("Preferred over nothing = %q", p)
	}
}

// TestOrderAndDuplicatesIgnored: any order of the broker rows, with duplicates,
// gives the same answer as the sorted distinct set, and the input is not modified.
func TestOrderAndDuplicatesIgnored(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	base := brokers(12)
	for i := range 2000 {
		key := fmt.Sprintf("group-%d", i)
		dead := deadSet(base[r.IntN(12)], base[r.IntN(12)])
		want, wok := Coordinator(key, base, dead)
		wantP := Preferred(key, base)
		in := append([]string(nil), base...)
		in = append(in, base[r.IntN(12)], base[r.IntN(12)])
		r.Shuffle(len(in), func(a, b int) { in[a], in[b] = in[b], in[a] })
		snapshot := append([]string(nil), in...)
		got, ok := Coordinator(key, in, dead)
		if got != want || ok != wok || Preferred(key, in) != wantP {
			t.Fatalf("%s: shuffled %v gives %s/%s, sorted gives %s/%s", key, in, got, Preferred(key, in), want, wantP)
		}
		for j := range in {
			if in[j] != snapshot[j] {
				t.Fatalf("input modified")
			}
		}
	}
}

func randomKeys(n int) []string {
	r := rand.New(rand.NewPCG(5, 6))
	keys := make([]string, n)
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."
	for i := range keys {
		b := make([]byte, 4+r.IntN(28))
		for j := range b {
			b[j] = chars[r.IntN(len(chars))]
		}
		keys[i] = string(b)
	}
	return keys
}

// TestStabilityOneDeath is performance goal 12 and spec §2's measurable properties.
func TestStabilityOneDeath(t *testing.T) {
	keys := randomKeys(100_000)
	for _, n := range []int{3, 5, 12} {
		ids := brokers(n)
		before := make([]string, len(keys))
		for i, k := range keys {
			before[i], _ = Coordinator(k, ids, allAlive)
		}
		for _, dead := range ids {
			moved := 0
			share := map[string]int{}
			after := make([]string, len(keys))
			for i, k := range keys {
				got, ok := Coordinator(k, ids, deadSet(dead))
				if !ok || got == dead {
					t.Fatalf("n=%d dead=%s: %q routed to %q ok=%v", n, dead, k, got, ok)
				}
				after[i] = got
				if got != before[i] {
					if before[i] != dead {
						t.Fatalf("n=%d dead=%s: %q moved from alive %s to %s", n, dead, k, before[i], got)
					}
					moved++
					share[got]++
				}
			}
			if limit := len(keys)/n + len(keys)/100; moved > limit {
				t.Errorf("n=%d dead=%s: %d keys moved, limit %d", n, dead, moved, limit)
			}
			equal := float64(moved) / float64(n-1)
			for _, b := range ids {
				if b == dead {
					continue
				}
				if got := float64(share[b]); got < 0.8*equal || got > 1.2*equal {
					t.Errorf("n=%d dead=%s: %s received %d of %d moved keys, equal share %.0f", n, dead, b, share[b], moved, equal)
				}
			}
			// The broker returns: every key routes back.
			for i, k := range keys {
				if got, _ := Coordinator(k, ids, allAlive); got != before[i] {
					t.Fatalf("n=%d: %q did not route back to %s after %s returned", n, k, before[i], dead)
				}
			}
			// A second death moves only the keys of the newly dead broker.
			second := ids[(indexOf(ids, dead)+1)%n]
			for i, k := range keys {
				got, ok := Coordinator(k, ids, deadSet(dead, second))
				if n == 2 && !ok {
					continue
				}
				if after[i] != second && got != after[i] {
					t.Fatalf("n=%d dead=%s,%s: %q moved from %s to %s", n, dead, second, k, after[i], got)
				}
				if got == dead || got == second {
					t.Fatalf("n=%d: %q routed to dead %s", n, k, got)
				}
			}
		}
	}
}

func indexOf(ids []string, id string) int {
	for i, s := range ids {
		if s == id {
			return i
		}
	}
	return -1
}

// TestDocVectors parses the vector table of docs/routing.md and checks every row,
// so the documentation cannot drift from the code. Regenerate the rows with
//
//	KAAS_PRINT_VECTORS=1 go test -run TestDocVectors -v ./internal/route/
func TestDocVectors(t *testing.T) {
	keys := []string{"", "a", "foobar", "g1", "my-group", "group-x", "console-consumer-1", "orders-app", "txn-7", "kaas"}
	if os.Getenv("KAAS_PRINT_VECTORS") != "" {
		for _, k := range keys {
			t.Log(vectorRow(k))
		}
	}
	f, err := os.Open("../../docs/routing.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		key, err := strconv.Unquote(strings.Trim(strings.TrimSpace(cells[0]), "`"))
		if err != nil {
			t.Fatalf("bad key cell in %q: %v", line, err)
		}
		if want := vectorRow(key); line != want {
			t.Errorf("docs/routing.md row\n  %s\nwant\n  %s", line, want)
		}
		rows++
	}
	if rows < len(keys) {
		t.Fatalf("docs/routing.md has %d vector rows, want at least %d", rows, len(keys))
	}
}

// vectorRow is one row of the docs table: key, FNV-1a-32, the placement over
// kaas-0..2 with all alive and with the preferred broker dead, the same over
// kaas-0..11, and the fallback weight of the key on kaas-0.
func vectorRow(key string) string {
	b3, b12 := brokers(3), brokers(12)
	p3 := Preferred(key, b3)
	f3, _ := Coordinator(key, b3, deadSet(p3))
	p12 := Preferred(key, b12)
	f12, _ := Coordinator(key, b12, deadSet(p12))
	return fmt.Sprintf("| `%s` | 0x%08x | %s | %s | %s | %s | 0x%016x |",
		strconv.Quote(key), FNV1a32(key), p3, f3, p12, f12, Weight(key, "kaas-0"))
}

func BenchmarkCoordinator(b *testing.B) {
	keys := randomKeys(1024)
	ids := brokers(12)
	b.Run("preferred-alive", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			Coordinator(keys[i&1023], ids, allAlive)
		}
	})
	dead := deadSet("kaas-3")
	b.Run("one-dead", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			Coordinator(keys[i&1023], ids, dead)
		}
	})
	shuffled := append([]string(nil), ids...)
	shuffled[0], shuffled[5] = shuffled[5], shuffled[0]
	b.Run("unsorted-input", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			Coordinator(keys[i&1023], shuffled, dead)
		}
	})
}
