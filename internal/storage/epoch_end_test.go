package storage

import "testing"

// TestEpochEndFollowsTheLeaderEpochHistory: a partition led at epochs 1
// (offsets 0..3), 3 (4..5, epoch 2 never led it) and 5 (6.., the current
// leader) answers OffsetForLeaderEpoch as Kafka's leader-epoch cache does.
func TestEpochEndFollowsTheLeaderEpochHistory(t *testing.T) {
	dir := t.TempDir()
	l1 := openT(t, dir, Options{LeaderEpoch: 1})
	appendT(t, l1, makeBatch(spec{n: 4}))
	syncT(t, l1)
	if err := l1.Close(); err != nil {
		t.Fatal(err)
	}
	l3 := openT(t, dir, Options{LeaderEpoch: 3})
	appendT(t, l3, makeBatch(spec{n: 2}))
	syncT(t, l3)
	if err := l3.Close(); err != nil {
		t.Fatal(err)
	}
	l5 := openT(t, dir, Options{LeaderEpoch: 5})
	defer l5.Close()
	appendT(t, l5, makeBatch(spec{n: 3}))
	syncT(t, l5)

	for _, c := range []struct {
		requested, epoch int32
		end              int64
	}{
		{-1, -1, -1}, // no epoch asked
		{0, 0, 0},    // older than the history: ends where epoch 1 starts
		{1, 1, 4},
		{2, 1, 4}, // never led at 2: the largest epoch below it
		{3, 3, 6},
		{4, 3, 6},
		{5, 5, 9}, // the current epoch ends at the log end
		{6, -1, -1},
	} {
		epoch, end := l5.EpochEnd(c.requested)
		if epoch != c.epoch || end != c.end {
			t.Errorf("EpochEnd(%d) = (%d, %d), want (%d, %d)", c.requested, epoch, end, c.epoch, c.end)
		}
	}
}
