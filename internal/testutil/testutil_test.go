package testutil

import (
	"errors"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	n := 0
	if err := Poll(time.Second, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("Poll = %v after %d calls", err, n)
	}
	start := time.Now()
	if err := Poll(50*time.Millisecond, func() error { return errors.New("never") }); err == nil || time.Since(start) > time.Second {
		t.Fatalf("Poll of a condition never met = %v after %v", err, time.Since(start))
	}
}
