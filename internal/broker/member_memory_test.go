package broker

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/testutil"
)

// TestMemberMetadataIsFreedWithTheMember: 12 members join one group with
// 8 MiB of protocol metadata each and their clients go away without
// LeaveGroup; once their sessions expire (as in Kafka, members stay until
// then), the heap is back where it started.
func TestMemberMetadataIsFreedWithTheMember(t *testing.T) {
	gc := group.DefaultConfig()
	gc.InitialRebalanceDelay = 0
	gc.MinSessionTimeout = 500 * time.Millisecond
	b := startGroupBroker(t, t.TempDir(), &gc, nil)
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	base := heap()
	const members, size = 12, 8 << 20
	var wg sync.WaitGroup
	for range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
			if err != nil {
				t.Error(err)
				return
			}
			defer cl.Close()
			req := kmsg.NewPtrJoinGroupRequest()
			req.Group, req.ProtocolType = "big-metadata", "consumer"
			req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 1000, 2000
			p := kmsg.NewJoinGroupRequestProtocol()
			p.Name, p.Metadata = "range", make([]byte, size)
			req.Protocols = append(req.Protocols, p)
			// Generous: 12 joins of 8 MiB each take about 8 s with the race
			// detector on 2 cores, and the whole suite runs beside them in
			// CI; what the test bounds is the memory, below.
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()
			resp, err := req.RequestWith(ctx, cl)
			if err == nil && resp.ErrorCode == 79 { // MEMBER_ID_REQUIRED (KIP-394)
				req.MemberID = resp.MemberID
				resp, err = req.RequestWith(ctx, cl)
			}
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	held := heap() - base
	t.Logf("members' metadata held: %d MiB", held>>20)
	testutil.WaitFor(t, 15*time.Second, func() error {
		if grew := heap() - base; grew > 16<<20 {
			return fmt.Errorf("heap still %d MiB above the start after the sessions expired", grew>>20)
		}
		return nil
	})
}
