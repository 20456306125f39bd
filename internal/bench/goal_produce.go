package bench

import (
	"context"
	"fmt"
	"time"
)

func init() { Register(produceGoal{}) }

// produceGoal measures produce throughput for each concurrency: N idempotent
// producers, acks=all, 1 KiB records, producer i on partition i of an
// N-partition topic.
//
// Like with like: kaas on tmpfs against kfake (both in memory). Durable kaas
// (each ack after an fsync) has its latency bounded by the fsynced-append
// limit L; its throughput is printed against kfake for scale only.
type produceGoal struct{}

func (produceGoal) Name() string { return "produce" }
func (produceGoal) Describe() string {
	return "produce 1 KiB records, idempotent, acks=all: p50 of one record per request (kaas-tmpfs vs kfake; durable kaas vs L = fsynced append + loopback) and throughput of N producers (kaas-tmpfs vs kfake; durable kaas for scale)"
}

// Latency bounds: kaas on tmpfs within 10% of kfake; durable kaas within
// 25% of the raw fsynced append plus one loopback round trip (the cost a
// durable produce cannot avoid).
const (
	memLatencyBound     = 1.1
	durableLatencyBound = 1.25
)

func (produceGoal) Run(ctx context.Context, env *Env) ([]Row, error) {
	const g = "produce"
	lim, err := env.Limits(ctx)
	if err != nil {
		return nil, err
	}
	var rows []Row
	kind := "durable"
	if !env.Kaas.Durable {
		kind = "data dir on tmpfs, not durable"
	}

	// Latency: one record per request, one producer.
	window := min(env.Duration, 2*time.Second)
	latency := func(t Target) (p50, p99 time.Duration, n int, err error) {
		const topic = "bench-produce-latency"
		if err := CreateTopic(ctx, t, topic, 1); err != nil {
			return 0, 0, 0, err
		}
		defer func() {
			if err := DeleteTopic(ctx, t, topic); err != nil {
				env.Log.Warn("delete topic", "target", t.Name, "topic", topic, "err", err)
			}
		}()
		lat, err := ProduceLatency(ctx, t, topic, window)
		if err != nil {
			return 0, 0, 0, err
		}
		return percentile(lat, 0.5), percentile(lat, 0.99), len(lat), nil
	}
	peer50, peer99, _, err := latency(env.Kfake)
	if err != nil {
		return rows, err
	}
	if env.KaasMem != nil {
		p50, p99, n, err := latency(*env.KaasMem)
		if err != nil {
			return rows, err
		}
		rows = append(rows, AtMost(g, "produce p50, 1 record/request, kaas-tmpfs vs kfake", "µs",
			us(p50), us(peer50), RefKfake, memLatencyBound,
			fmt.Sprintf("in memory both; p99 %s vs %s; %d requests", fmtDur(p99), fmtDur(peer99), n)))
	}
	p50, p99, n, err := latency(env.Kaas)
	if err != nil {
		return rows, err
	}
	l := lim.AppendP50 + lim.LoopP50
	row := AtMost(g, fmt.Sprintf("produce p50, 1 record/request, kaas %s vs L", kind), "µs",
		us(p50), us(l), RefL, durableLatencyBound,
		fmt.Sprintf("L = fsynced append p50 %s + loopback p50 %s; p99 %s; %d requests",
			fmtDur(lim.AppendP50), fmtDur(lim.LoopP50), fmtDur(p99), n))
	if env.Kafka != nil {
		k50, k99, kn, err := latency(*env.Kafka)
		env.Settle()
		row = row.WithKafka(us(k50), fmt.Sprintf("p99 %s; %d requests", fmtDur(k99), kn), err)
	}
	rows = append(rows, row)

	// Throughput: c producers, producer i on partition i.
	for _, c := range env.Concurrency {
		spec := ProduceSpec{Partitions: c, Producers: c, Duration: env.Duration}
		run := func(t Target) (ProduceResult, error) {
			s := spec
			s.Topic = fmt.Sprintf("bench-produce-%d", c)
			if err := CreateTopic(ctx, t, s.Topic, int32(c)); err != nil {
				return ProduceResult{}, err
			}
			defer func() {
				if err := DeleteTopic(ctx, t, s.Topic); err != nil {
					env.Log.Warn("delete topic", "target", t.Name, "topic", s.Topic, "err", err)
				}
			}()
			return Produce(ctx, t, s)
		}
		peer, err := run(env.Kfake)
		if err != nil {
			return rows, err
		}
		var mem *ProduceResult
		if env.KaasMem != nil {
			m, err := run(*env.KaasMem)
			if err != nil {
				return rows, err
			}
			mem = &m
			rows = append(rows, AtLeast(g, fmt.Sprintf("produce c=%d, kaas-tmpfs vs kfake", c), "rec/s",
				m.RecordsPerSec(), peer.RecordsPerSec(), RefKfake, 1.0,
				fmt.Sprintf("in memory both; MB/s %.1f vs %.1f", m.MBPerSec(), peer.MBPerSec())))
		}
		disk, err := run(env.Kaas)
		if err != nil {
			return rows, err
		}
		note := fmt.Sprintf("not like with like, for scale; %.1f MB/s; %.0f acked batches/s (%.0f rec/batch)",
			disk.MBPerSec(), disk.BatchesPerSec(), float64(disk.Records)/max(1, float64(disk.Batches)))
		if mem != nil && mem.Records > 0 {
			note += fmt.Sprintf("; %.2f × kaas-tmpfs", disk.RecordsPerSec()/mem.RecordsPerSec())
		}
		row := Info(g, fmt.Sprintf("produce c=%d, kaas %s vs kfake", c, kind), "rec/s",
			disk.RecordsPerSec(), peer.RecordsPerSec(), RefKfake, note)
		if env.Kafka != nil {
			k, err := run(*env.Kafka)
			env.Settle()
			row = row.WithKafka(k.RecordsPerSec(), fmt.Sprintf("%.1f MB/s; %.0f acked batches/s", k.MBPerSec(), k.BatchesPerSec()), err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}
