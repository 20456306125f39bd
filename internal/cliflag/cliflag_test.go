package cliflag

import (
	"testing"
	"time"
)

func TestEnvironmentThenCommandLine(t *testing.T) {
	t.Setenv("KAAS_DATA_DIR", "/from/env")
	t.Setenv("KAAS_DEAD_AFTER", "7s")
	s := New("x")
	dir := s.String("data-dir", "", "")
	dead := s.Duration("dead-after", time.Second, "")
	if err := s.Parse([]string{"--dead-after", "9s"}); err != nil {
		t.Fatal(err)
	}
	if *dir != "/from/env" || *dead != 9*time.Second {
		t.Fatalf("data-dir %q dead-after %v: want the environment, then the command line over it", *dir, *dead)
	}
	t.Setenv("KAAS_DEAD_AFTER", "3")
	if err := New("y").Parse(nil); err != nil {
		t.Fatal(err)
	}
	s2 := New("z")
	s2.Duration("dead-after", time.Second, "")
	if err := s2.Parse(nil); err == nil {
		t.Fatal("a bad environment value was accepted")
	}
}
