package topics

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"orders", "a.b-c_d", "A1", string(make([]byte, 0)) + "x"} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	long := make([]byte, 250)
	for i := range long {
		long[i] = 'a'
	}
	for _, bad := range []string{"", ".", "..", "a/b", "../x", "a b", "__cluster", "__consumer_offsets", string(long), "a\x00"} {
		if err := ValidateName(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestCreateIsExclusiveAcrossRegistries(t *testing.T) {
	dir := t.TempDir()
	var wins, losses int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := Open(dir, nil) // as another broker would
			if err != nil {
				t.Error(err)
				return
			}
			_, err = r.Create("race", 3, nil, false)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, ErrExists):
				losses++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || losses != 7 {
		t.Fatalf("%d creators won, %d lost", wins, losses)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "__cluster", "topics"))
	if len(ents) != 1 {
		t.Fatalf("files left: %d", len(ents))
	}
}

func TestRefreshSeesOtherBrokersAndSkipsTornFiles(t *testing.T) {
	dir := t.TempDir()
	a, _ := Open(dir, nil)
	b, _ := Open(dir, nil)
	if _, err := a.Create("t1", 2, map[string]string{"retention.ms": "1000"}, false); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "__cluster", "topics", "torn.json"), []byte(`{"name":"to`), 0o644)
	if err := b.Refresh(); err != nil {
		t.Fatal(err)
	}
	all := b.All()
	if len(all) != 1 || all[0].Name != "t1" || all[0].Int64("retention.ms", 0) != 1000 {
		t.Fatalf("b sees %+v", all)
	}
	if _, err := b.Delete("t1"); err != nil {
		t.Fatal(err)
	}
	a.Refresh()
	if _, ok := a.Get("t1"); ok {
		t.Fatal("a still sees a deleted topic")
	}
}

func TestValidateConfigs(t *testing.T) {
	good := map[string]string{"retention.ms": "-1", "cleanup.policy": "compact,delete", "message.timestamp.type": "LogAppendTime", "compression.type": "zstd"}
	if err := ValidateConfigs(good); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []map[string]string{{"retention.ms": "x"}, {"cleanup.policy": "shred"}, {"nope": "1"}, {"max.message.bytes": "-5"}} {
		if err := ValidateConfigs(bad); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%v accepted", bad)
		}
	}
}

// FuzzTopicFile: the registry never panics on a damaged topic file, and
// never registers a file that does not match its name.
func FuzzTopicFile(f *testing.F) {
	f.Add([]byte(`{"name":"t","id":"00112233445566778899aabbccddeeff","partitions":3}`))
	f.Add([]byte(`{"name":"other","partitions":3}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "__cluster", "topics"), 0o755)
		os.WriteFile(filepath.Join(dir, "__cluster", "topics", "t.json"), b, 0o644)
		r, err := Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tp := range r.All() {
			if tp.Name != "t" || tp.Partitions < 1 {
				t.Fatalf("registered %+v", tp)
			}
		}
	})
}

// TestGenMovesOnlyWhenTopicsChange: Gen grows when this registry creates,
// grows or deletes a topic and when a refresh finds another broker's
// change, and stays put across refreshes that find none (the consumer
// groups' topic image is rebuilt only when it moves).
func TestGenMovesOnlyWhenTopicsChange(t *testing.T) {
	dir := t.TempDir()
	a, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	step := func(what string, fn func() error, moves bool) {
		t.Helper()
		before := b.Gen()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := b.Refresh(); err != nil {
			t.Fatal(err)
		}
		if moved := b.Gen() != before; moved != moves {
			t.Fatalf("%s: gen %d → %d, want moved=%v", what, before, b.Gen(), moves)
		}
	}
	step("a creates", func() error { _, err := a.Create("t1", 2, nil, false); return err }, true)
	step("nothing", func() error { return nil }, false)
	step("a grows", func() error { _, err := a.Grow("t1", 3, false); return err }, true)
	step("nothing", func() error { return nil }, false)
	step("b deletes", func() error { _, err := b.Delete("t1"); return err }, true)
	step("nothing", func() error { return nil }, false)
}

// TestAGrowByAnotherBrokerIsSeenAtTheNextRefresh: CreatePartitions
// rewrites the topic's file by rename; a broker that read the old file
// must see the new count at its next refresh even when the new file has
// the old one's size and modification time (a coarse file-system clock:
// one tick, or one second on some NFS servers). It kept the old count.
func TestAGrowByAnotherBrokerIsSeenAtTheNextRefresh(t *testing.T) {
	dir := t.TempDir()
	a, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create("t1", 2, nil, false); err != nil {
		t.Fatal(err)
	}
	if err := b.Refresh(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(a.path("t1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Grow("t1", 3, false); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(a.path("t1"), fi.ModTime(), fi.ModTime()); err != nil { // the same clock tick
		t.Fatal(err)
	}
	if err := b.Refresh(); err != nil {
		t.Fatal(err)
	}
	if got, ok := b.Get("t1"); !ok || got.Partitions != 3 {
		t.Fatalf("after another broker grew t1 to 3 partitions, this one reads %+v", got)
	}
}

// TestAlterConfigsAsKafka: SET, DELETE, APPEND and SUBTRACT on a topic's
// configs, refused with Kafka's messages where Kafka refuses (an unknown
// name or a bad value: INVALID_CONFIG; a key twice, APPEND on a single
// value: INVALID_REQUEST), nothing written for a refusal or validateOnly,
// and another broker reading the result at its next refresh.
func TestAlterConfigsAsKafka(t *testing.T) {
	dir := t.TempDir()
	a, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create("t1", 1, map[string]string{"retention.ms": "60000"}, false); err != nil {
		t.Fatal(err)
	}
	str := func(s string) *string { return &s }
	refused := []struct {
		ops     []ConfigOp
		request bool
		msg     string
	}{
		{[]ConfigOp{{Name: "retention.ms", Value: str("x")}}, false, "Invalid value x for configuration retention.ms: Not a number of type LONG"},
		{[]ConfigOp{{Name: "nope", Value: str("1")}}, false, "Unknown topic config name: nope"},
		{[]ConfigOp{{Name: "retention.ms", Value: str("1")}, {Name: "retention.ms", Op: OpDelete}}, true, "Error due to duplicate config keys"},
		{[]ConfigOp{{Name: "retention.ms", Op: OpAppend, Value: str("1")}}, true, "Config value append is not allowed for config key: retention.ms"},
		{[]ConfigOp{{Name: "max.message.bytes", Value: str("100")}, {Name: "segment.bytes", Value: str("10")}}, false, "Invalid value 10 for configuration segment.bytes: Value must be at least 1048576"},
	}
	for _, c := range refused {
		_, err := a.AlterConfigs("t1", c.ops, false)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.InvalidRequest() != c.request || ce.Error() != c.msg {
			t.Errorf("%+v: %v, want %q (invalid request %v)", c.ops, err, c.msg, c.request)
		}
	}
	if _, err := a.AlterConfigs("t1", []ConfigOp{{Name: "retention.ms", Value: str("1000")}}, true); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Get("t1"); got.Configs["retention.ms"] != "60000" || got.Configs["max.message.bytes"] != "" {
		t.Fatalf("a refused or validate-only alter changed the topic: %v", got.Configs)
	}
	if _, err := a.AlterConfigs("t1", []ConfigOp{{Name: "retention.ms", Op: OpDelete}, {Name: "max.message.bytes", Value: str(" 2048 ")},
		{Name: "cleanup.policy", Op: OpAppend, Value: str("compact")}}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AlterConfigs("t1", []ConfigOp{{Name: "cleanup.policy", Op: OpSubtract, Value: str("delete")}}, false); err != nil {
		t.Fatal(err)
	}
	if err := b.Refresh(); err != nil {
		t.Fatal(err)
	}
	got, _ := b.Get("t1")
	want := map[string]string{"max.message.bytes": "2048", "cleanup.policy": "compact"}
	if !maps.Equal(got.Configs, want) || got.Partitions != 1 {
		t.Fatalf("the other broker reads %v, want %v", got.Configs, want)
	}
	if _, err := a.AlterConfigs("missing", nil, false); !errors.Is(err, ErrUnknown) {
		t.Fatalf("an unknown topic: %v", err)
	}
}
