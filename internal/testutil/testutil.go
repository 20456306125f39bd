// Package testutil holds what kaas's tests share: waiting on a condition
// instead of sleeping, and a buffer goroutines may write at once. It is
// imported by tests and test harnesses only.
package testutil

import (
	"bytes"
	"fmt"
	"sync"
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

// LockedBuffer is a bytes.Buffer that several goroutines may use at once:
// a process's output copier or a logger, and the test reading it.
type LockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
