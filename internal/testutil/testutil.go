// Package testutil holds what kaas's tests share: waiting on a condition
// instead of sleeping. It is imported by tests and test harnesses only.
package testutil

import (
	"fmt"
	"testing"
	"time"
)

// Poll calls cond every 20 ms until it returns nil or timeout has passed,
// and returns the last error (nil when the condition was met).
func Poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitFor is Poll that fails the test when the condition is not met.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Poll(timeout, cond); err != nil {
		t.Fatalf("condition not met: %v", err)
	}
}
