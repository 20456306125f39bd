package powercut

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/powerfs"
	"github.com/kaas-dev/kaas/internal/testutil"
	"github.com/kaas-dev/kaas/internal/volume"
)

// probeGroup is the group of the direct offset-commit probe: its own, so
// that its commits never race the committer's on one group.
const probeGroup = "pc-probe"

// Paths on the volume (relative to the mount root) that the faults aim at.
var (
	offsetsPath  = "^" + regexp.QuoteMeta(volume.OffsetsDir("")) + "(/|$)"
	segmentsPath = "^(" + plainTopic + "|" + txnTopic + `)/\d+/\d+\.log$`
	txnStatePath = "^" + regexp.QuoteMeta(volume.TransactionsDir("")) + "(/|$)"
)

// faultPhase is one window of injected failures.
type faultPhase struct {
	name  string
	fault powerfs.Fault
	// probe is what must see an error while the fault is armed ("" when the
	// clients retry it away and no error is expected to surface).
	probe string
}

var faultPhases = []faultPhase{
	{"offsets files: fsync fails (EIO)", powerfs.Fault{Op: powerfs.OpFsync, Path: offsetsPath}, "commit"},
	{"offsets files: rename fails (EIO)", powerfs.Fault{Op: powerfs.OpRename, Path: offsetsPath}, "commit"},
	{"offsets files: write fails (ENOSPC)", powerfs.Fault{Op: powerfs.OpWrite, Path: offsetsPath, Errno: syscall.ENOSPC}, "commit"},
	{"log segments: fsync fails (EIO)", powerfs.Fault{Op: powerfs.OpFsync, Path: segmentsPath}, "produce"},
	{"log segments: write fails (ENOSPC)", powerfs.Fault{Op: powerfs.OpWrite, Path: segmentsPath, Errno: syscall.ENOSPC}, "produce"},
	{"transaction state: fsync fails (EIO)", powerfs.Fault{Op: powerfs.OpFsync, Path: txnStatePath}, ""},
}

// phaseResult is one phase, for the log and the table.
type phaseResult struct {
	Name         string
	Injected     int // calls failed by the fault
	ClientErrors int // errors the probe saw
	Problems     []string
}

// TestDiskFaults injects disk errors under the workload, one kind at a
// time, and checks that each reaches the client as an error (never as an
// acknowledgement) and that the cluster recovers once the disk does; then
// it cuts the power and checks that everything acknowledged, before,
// during and after the faults, is there.
func TestDiskFaults(t *testing.T) {
	m := modeFromEnv(t)
	r := newRig(t, 3, plainTopic, txnTopic)
	l := newLedger()
	ld, err := startLoad(r.c.Addrs(), 0, l, rand.New(rand.NewPCG(m.seed, 2)))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			ld.stop()
		}
	}()
	if err := waitProgress(l, counts{}, 45*time.Second); err != nil {
		t.Fatalf("load did not start: %v", err)
	}
	pr, err := startProbe(r.c.Addrs(), l)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.stop()

	var results []phaseResult
	for _, ph := range faultPhases {
		res := r.faultPhase(ph, l, pr)
		results = append(results, res)
		t.Logf("%s: %d calls failed, the client saw %d errors; %d problems", ph.name, res.Injected, res.ClientErrors, len(res.Problems))
		for _, p := range res.Problems {
			t.Errorf("%s: %s", ph.name, p)
		}
	}
	pr.stop()

	loss, err := r.powerCut(ld)
	stopped = true
	if err != nil {
		t.Fatalf("power cut: %v", err)
	}
	if err := r.c.StartAll(); err != nil {
		t.Fatalf("a broker did not start after the cut: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	v := verify(ctx, r.c.Addrs(), 1, l)
	c := l.counts()
	t.Logf("after the faults and a cut (dropped %d files, %d namespace ops): %d records, %d commits, %d transactions checked; acked %d records (%d failed), %d commits (%d failed)",
		loss.Files, loss.Ops, v.Records, v.Commits, v.Txns, c.Records, c.RecordsFailed, c.Commits, c.CommitsFailed)
	if len(v.Problems) > 0 {
		t.Errorf("after the faults and a cut, %d problems:\n  %s", len(v.Problems), strings.Join(v.Problems, "\n  "))
	}
	if m.out != "" {
		if err := writeFaultTable(m.out, results, v); err != nil {
			t.Error(err)
		}
	}
}

// faultPhase arms ph's fault until it has failed calls and the probe has
// seen an error (or 20s), keeps it armed one more second, disarms it and
// waits for the workload to progress again.
func (r *rig) faultPhase(ph faultPhase, l *ledger, pr *probe) phaseResult {
	res := phaseResult{Name: ph.name}
	before := r.fs.Failed()[ph.fault.Op]
	probeBefore := pr.errors(ph.probe)
	if err := r.fs.Inject(ph.fault); err != nil {
		res.Problems = append(res.Problems, err.Error())
		return res
	}
	err := testutil.Poll(20*time.Second, func() error {
		if r.fs.Failed()[ph.fault.Op] == before {
			return fmt.Errorf("no %v call on a matching path yet", ph.fault.Op)
		}
		if ph.probe != "" && pr.errors(ph.probe) == probeBefore {
			return fmt.Errorf("the %s probe saw no error yet", ph.probe)
		}
		return nil
	})
	if err != nil {
		res.Problems = append(res.Problems, fmt.Sprintf("while the fault was armed: %v", err))
	}
	hold := time.NewTimer(time.Second) // the fault lasts a while
	<-hold.C
	r.fs.ClearFaults()
	res.Injected = r.fs.Failed()[ph.fault.Op] - before
	res.ClientErrors = pr.errors(ph.probe) - probeBefore
	if err := waitProgress(l, l.counts(), 45*time.Second); err != nil {
		res.Problems = append(res.Problems, fmt.Sprintf("no recovery after the fault was cleared: %v", err))
	}
	return res
}

// probe sends requests that clients would otherwise retry, so that an
// error answer is seen: offset commits sent straight to the group's
// coordinator, and acks=all produces without retries. What it is told
// succeeded goes to the ledger like any acknowledgement.
type probe struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	cl     *kgo.Client
	prod   *kgo.Client
	mu     sync.Mutex     // guards errs
	errs   map[string]int // by "commit", "produce"
	once   sync.Once
}

func startProbe(seeds []string, l *ledger) (*probe, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RetryTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(plainTopic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DisableIdempotentWrite(),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(1), kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(10*time.Second))
	if err != nil {
		cl.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &probe{cancel: cancel, cl: cl, prod: prod, errs: map[string]int{}}
	p.wg.Add(2)
	go func() { defer p.wg.Done(); p.commits(ctx, l) }()
	go func() { defer p.wg.Done(); p.produces(ctx, l) }()
	return p, nil
}

func (p *probe) stop() {
	p.once.Do(func() {
		p.cancel()
		p.wg.Wait()
		p.cl.Close()
		p.prod.Close()
	})
}

func (p *probe) failed(kind string) {
	p.mu.Lock()
	p.errs[kind]++
	p.mu.Unlock()
}

func (p *probe) errors(kind string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errs[kind]
}

func (p *probe) commits(ctx context.Context, l *ledger) {
	adm := kadm.NewClient(p.cl)
	paced(ctx, 50*time.Millisecond, func(int) {
		if err := p.commitOnce(ctx, adm, l); err != nil {
			p.failed("commit")
		}
	})
}

// commitOnce commits the next value for every partition in probeGroup,
// straight to the coordinator: an error code is an error, not a retry.
func (p *probe) commitOnce(ctx context.Context, adm *kadm.Client, l *ledger) error {
	co, ok := adm.FindGroupCoordinators(ctx, probeGroup)[probeGroup]
	if !ok || co.Err != nil {
		return nil // not a commit answer: the cluster is busy
	}
	v := l.commitValue()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group = probeGroup
	req.Generation = -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = plainTopic
	for pt := range int32(partitions) {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = pt, v, -1
		rt.Partitions = append(rt.Partitions, rp)
		l.commitSent(commitKey{probeGroup, pt}, v)
	}
	req.Topics = append(req.Topics, rt)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(rctx, p.cl.Broker(int(co.NodeID)))
	codes := map[int32]error{}
	if err == nil {
		for _, t := range resp.Topics {
			for _, rp := range t.Partitions {
				codes[rp.Partition] = kerr.ErrorForCode(rp.ErrorCode)
			}
		}
	}
	var first error
	for pt := range int32(partitions) {
		perr := err
		if perr == nil {
			var ok bool
			if perr, ok = codes[pt]; !ok {
				perr = fmt.Errorf("no answer for partition %d", pt)
			}
		}
		l.commitDone(commitKey{probeGroup, pt}, v, perr)
		if first == nil {
			first = perr
		}
	}
	return first
}

func (p *probe) produces(ctx context.Context, l *ledger) {
	paced(ctx, 20*time.Millisecond, func(n int) {
		r := &kgo.Record{Partition: int32(n % partitions), Value: fmt.Appendf(nil, "r0-q%d", n)}
		p.prod.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				p.failed("produce")
				l.failPlain()
				return
			}
			l.ackPlain(rec{Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
		})
	})
}

// writeFaultTable writes the long mode's fault table.
func writeFaultTable(out string, results []phaseResult, v verdict) error {
	var b strings.Builder
	b.WriteString("Disk faults (one cut after all of them):\n\n")
	b.WriteString("| fault | calls failed | errors the client saw | result |\n|---|---|---|---|\n")
	for _, r := range results {
		res := "passed"
		if len(r.Problems) > 0 {
			res = "FAILED: " + strings.Join(r.Problems, "; ")
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s |\n", r.Name, r.Injected, r.ClientErrors, res)
	}
	res := "passed"
	if len(v.Problems) > 0 {
		res = fmt.Sprintf("FAILED (%d problems): %s", len(v.Problems), strings.Join(v.Problems[:min(5, len(v.Problems))], "; "))
	}
	fmt.Fprintf(&b, "| after the cut: %d records, %d commits, %d transactions checked | – | – | %s |\n", v.Records, v.Commits, v.Txns, res)
	return appendResults(out, "faults", b.String())
}
