package cluster

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/testutil"
)

var errNotYet = errors.New("not yet")

// TestReportBroadcastWhileThePeerIsSlowStillReachesIt: a peer whose answer
// to one report outlasts the client's timeout still gets the report
// broadcast meanwhile, as soon as that answer ends. Before, that report was
// dropped (one request in flight per peer), and the peer's view of this
// broker (and this broker's Fresh, from the peer's answers) waited a whole
// report interval more: on a loaded machine, long enough to go stale.
func TestReportBroadcastWhileThePeerIsSlowStillReachesIt(t *testing.T) {
	const timeout = 300 * time.Millisecond
	var mu sync.Mutex
	var seqs []int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var rep Report
		if err := json.NewDecoder(req.Body).Decode(&rep); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		seqs = append(seqs, rep.Seq)
		first := len(seqs) == 1
		mu.Unlock()
		if first {
			time.Sleep(2 * timeout) // the sender gives up first
		}
		_ = json.NewEncoder(w).Encode(peerAck{ID: "b", Leader: true, KnownEpoch: 1, AppliedEpoch: 1, AppliedVersion: 1})
	}))
	defer srv.Close()

	p, err := listenPeers("a", "127.0.0.1:0", "127.0.0.1", timeout, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	p.learn(map[string]Report{"b": {ID: "b", ClusterAddr: strings.TrimPrefix(srv.URL, "http://")}})

	t0 := time.Now()
	p.broadcast(Report{ID: "a", Seq: 1}, t0)
	if err := testutil.Poll(5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(seqs) == 0 {
			return errNotYet
		}
		return nil
	}); err != nil {
		t.Fatal("the first report never reached the peer")
	}
	t1 := t0.Add(time.Second)
	p.broadcast(Report{ID: "a", Seq: 2}, t1) // the first is still in flight

	if err := testutil.Poll(5*time.Second, func() error {
		if a, ok := p.lastAcks()["b"]; !ok || !a.sentAt.Equal(t1) {
			return errNotYet
		}
		return nil
	}); err != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the report broadcast while the peer was slow was not answered; the peer got %v", seqs)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seqs) != 2 || seqs[1] != 2 {
		t.Errorf("the peer got reports %v, want [1 2]", seqs)
	}
}
