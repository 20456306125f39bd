package bench

import (
	"context"
	"fmt"
	"time"
)

func init() { Register(fetchGoal{}) }

// fetchGoal measures consuming a pre-produced topic from start to end with
// one client: kaas-tmpfs and durable kaas, each against kfake. Reading does
// not fsync, and what was just written is in the page cache, so both kaas
// targets are compared with the in-memory peer.
type fetchGoal struct{}

func (fetchGoal) Name() string { return "fetch" }
func (fetchGoal) Describe() string {
	return "consume a pre-produced 4-partition topic of 1 KiB records from start to end, one client: kaas vs kfake"
}

const fetchPartitions = 4

// fetchRecords scales the topic with the run's duration: 10k records per
// second of duration, between 2,000 and 100,000.
func fetchRecords(d time.Duration) int64 {
	return min(max(int64(d.Seconds()*10_000), 2_000), 100_000)
}

func (fetchGoal) Run(ctx context.Context, env *Env) ([]Row, error) {
	const g = "fetch"
	n := fetchRecords(env.Duration)
	limit := max(2*env.Duration, 10*time.Second)
	run := func(t Target) (ConsumeResult, int64, error) {
		topic := "bench-fetch"
		if err := CreateTopic(ctx, t, topic, fetchPartitions); err != nil {
			return ConsumeResult{}, 0, err
		}
		defer func() {
			if err := DeleteTopic(ctx, t, topic); err != nil {
				env.Log.Warn("delete topic", "target", t.Name, "topic", topic, "err", err)
			}
		}()
		p, err := Produce(ctx, t, ProduceSpec{Topic: topic, Partitions: fetchPartitions, Producers: fetchPartitions,
			Duration: limit, MaxRecords: n})
		if err != nil {
			return ConsumeResult{}, 0, err
		}
		want := p.Records + fetchPartitions // and one warm-up record per producer
		// The first consume in a process pays the client's warm-up (buffers,
		// decompressors, connections) whatever the target: measure the
		// second pass over the same data.
		if _, err := Consume(ctx, t, topic, want, limit); err != nil {
			return ConsumeResult{}, 0, err
		}
		c, err := Consume(ctx, t, topic, want, limit)
		return c, want, err
	}
	incomplete := func(who string, r ConsumeResult, want int64) string {
		if r.Records >= want {
			return ""
		}
		return fmt.Sprintf("; %s INCOMPLETE: %d of %d records", who, r.Records, want)
	}
	peer, pwant, err := run(env.Kfake)
	if err != nil {
		return nil, err
	}
	var rows []Row
	targets := []Target{env.Kaas}
	if env.KaasMem != nil {
		targets = []Target{*env.KaasMem, env.Kaas}
	}
	for _, t := range targets {
		ours, want, err := run(t)
		if err != nil {
			return rows, err
		}
		what := "in memory both"
		if t.Durable {
			what = "kaas log on disk (page cache), no fsync on this path"
		}
		row := AtLeast(g, fmt.Sprintf("fetch %d recs, %s vs kfake", want, t.Name), "rec/s",
			ours.RecordsPerSec(), peer.RecordsPerSec(), RefKfake, 1.0,
			fmt.Sprintf("%s; MB/s %.1f vs %.1f", what, ours.MBPerSec(), peer.MBPerSec())+
				incomplete(t.Name, ours, want)+incomplete("kfake", peer, pwant))
		if env.Kafka != nil && t.Durable {
			k, kwant, err := run(*env.Kafka)
			env.Settle()
			row = row.WithKafka(k.RecordsPerSec(), fmt.Sprintf("%.1f MB/s, the 4 partitions led by the cluster's brokers",
				k.MBPerSec())+incomplete("kafka", k, kwant), err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}
