package bench

import (
	"testing"
	"time"
)

// TestLongestGapCountsTheGapsTouchingTheWindow: the gap straddling the
// window's start counts, gaps wholly before or after it do not, and a gap
// still open when the wait ended counts up to then.
func TestLongestGapCountsTheGapsTouchingTheWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms ...int) []time.Time {
		var ts []time.Time
		for _, m := range ms {
			ts = append(ts, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return ts
	}
	from, to, now := t0.Add(1000*time.Millisecond), t0.Add(3000*time.Millisecond), t0.Add(5000*time.Millisecond)
	for _, c := range []struct {
		name string
		ts   []time.Time
		gap  time.Duration
		open bool
	}{
		{"overlaps the end", at(0, 900, 1010, 1020, 3100), 2080 * time.Millisecond, false},
		{"straddles the start", at(0, 100, 700, 1200, 1300, 3100), 1800 * time.Millisecond, false},
		{"a long gap before the window does not count", at(0, 600, 1010, 1500, 2000, 2500, 3050), 550 * time.Millisecond, false},
		{"a long gap after the window does not count", at(900, 1400, 1900, 2400, 2900, 3100, 4900), 500 * time.Millisecond, false},
		{"still open", at(900, 1400), 3600 * time.Millisecond, true},
		{"nothing at all", nil, 4000 * time.Millisecond, true},
	} {
		gap, open := longestGap(c.ts, from, to, now)
		if gap != c.gap || open != c.open {
			t.Errorf("%s: gap %v open %v, want %v %v", c.name, gap, open, c.gap, c.open)
		}
	}
}
