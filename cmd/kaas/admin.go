package main

// The admin commands: topics, groups, route and cluster. They speak the
// Kafka protocol through kadm, so they work against any Kafka cluster;
// `route` and `cluster` also read kaas's assignment from the volume when
// given --data-dir. Tables for people, --json for scripts.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/cluster"
	"github.com/kaas-dev/kaas/internal/route"
	"github.com/kaas-dev/kaas/internal/volume"
)

// adminFlags reach a cluster.
type adminFlags struct {
	Bootstrap string        `name:"bootstrap-server" short:"b" default:"127.0.0.1:9092" help:"Brokers to connect to, host:port comma separated."`
	JSON      bool          `name:"json" help:"Print JSON for scripts instead of a table."`
	Timeout   time.Duration `name:"timeout" default:"30s" help:"How long the command may take."`

	cl *kgo.Client // set by client
}

// client connects; the caller calls done.
func (a *adminFlags) client() (adm *kadm.Client, ctx context.Context, done func(), err error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(a.Bootstrap, ",")...), kgo.ClientID("kaas-admin"))
	if err != nil {
		return nil, nil, nil, err
	}
	a.cl = cl
	ctx, cancel := context.WithTimeout(context.Background(), a.Timeout)
	return kadm.NewClient(cl), ctx, func() { cancel(); cl.Close() }, nil
}

// metadata asks a broker for the cluster's metadata (all topics when none
// are named), bypassing the client's metadata cache: an admin command shows
// what the cluster says now. The answer has kadm's shape.
func (a *adminFlags) metadata(ctx context.Context, topics ...string) (kadm.Metadata, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	if len(topics) == 0 {
		req.Topics = nil // all topics
	}
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		return kadm.Metadata{}, err
	}
	m := kadm.Metadata{Controller: resp.ControllerID, Topics: kadm.TopicDetails{}}
	if resp.ClusterID != nil {
		m.Cluster = *resp.ClusterID
	}
	for _, b := range resp.Brokers {
		m.Brokers = append(m.Brokers, kgo.BrokerMetadata{NodeID: b.NodeID, Host: b.Host, Port: b.Port, Rack: b.Rack})
	}
	for _, t := range resp.Topics {
		td := kadm.TopicDetail{ID: t.TopicID, IsInternal: t.IsInternal, Partitions: kadm.PartitionDetails{}, Err: kerr.ErrorForCode(t.ErrorCode)}
		if t.Topic != nil {
			td.Topic = *t.Topic
		}
		for _, p := range t.Partitions {
			td.Partitions[p.Partition] = kadm.PartitionDetail{Topic: td.Topic, Partition: p.Partition, Leader: p.Leader,
				LeaderEpoch: p.LeaderEpoch, Replicas: p.Replicas, ISR: p.ISR, Err: kerr.ErrorForCode(p.ErrorCode)}
		}
		m.Topics[td.Topic] = td
	}
	return m, nil
}

// print writes v as JSON with --json, else calls table with a tab writer.
func (a *adminFlags) print(v any, table func(w io.Writer)) error {
	if a.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// ---- topics ----

type topicsCmd struct {
	List          topicsListCmd          `cmd:"" help:"List the topics."`
	Describe      topicsDescribeCmd      `cmd:"" help:"Show topics' partitions, leaders and configs."`
	Create        topicsCreateCmd        `cmd:"" help:"Create a topic."`
	Delete        topicsDeleteCmd        `cmd:"" help:"Delete topics."`
	AddPartitions topicsAddPartitionsCmd `cmd:"" name:"add-partitions" help:"Raise a topic's partition count."`
}

type topicRow struct {
	Name       string `json:"name"`
	ID         string `json:"id"`
	Partitions int    `json:"partitions"`
	Internal   bool   `json:"internal,omitempty"`
}

type topicsListCmd struct {
	adminFlags
	ExcludeInternal bool `name:"exclude-internal" help:"Leave out the internal topics (__consumer_offsets, __transaction_state), as kafka-topics --exclude-internal does."`
}

func (c *topicsListCmd) Run() error {
	_, ctx, done, err := c.client()
	if err != nil {
		return err
	}
	defer done()
	md, err := c.metadata(ctx)
	if err != nil {
		return err
	}
	var rows []topicRow
	for _, t := range md.Topics.Sorted() {
		if t.IsInternal && c.ExcludeInternal {
			continue
		}
		rows = append(rows, topicRow{Name: t.Topic, ID: topicID(t.ID), Partitions: len(t.Partitions), Internal: t.IsInternal})
	}
	return c.print(rows, func(w io.Writer) {
		fmt.Fprintln(w, "TOPIC\tPARTITIONS")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%d\n", r.Name, r.Partitions)
		}
	})
}

type partitionRow struct {
	Partition int32   `json:"partition"`
	Leader    int32   `json:"leader"`
	Epoch     int32   `json:"leaderEpoch"`
	Replicas  []int32 `json:"replicas"`
	ISR       []int32 `json:"isr"`
	Error     string  `json:"error,omitempty"`
}

type topicDetail struct {
	topicRow
	Configs        map[string]string `json:"configs"`
	PartitionsList []partitionRow    `json:"partitionList"`
}

type topicsDescribeCmd struct {
	adminFlags
	Topics []string `arg:"" optional:"" help:"Topics (default: all)."`
}

func (c *topicsDescribeCmd) Run() error {
	adm, ctx, done, err := c.client()
	if err != nil {
		return err
	}
	defer done()
	md, err := c.metadata(ctx, c.Topics...)
	if err != nil {
		return err
	}
	td := md.Topics
	var out []topicDetail
	var names []string
	for _, t := range td.Sorted() {
		if t.Err != nil {
			return fmt.Errorf("topic %s: %w", t.Topic, t.Err)
		}
		names = append(names, t.Topic)
	}
	configs := map[string]map[string]string{}
	if len(names) > 0 {
		rcs, err := adm.DescribeTopicConfigs(ctx, names...)
		if err != nil {
			return err
		}
		for _, rc := range rcs {
			m := map[string]string{}
			for _, cf := range rc.Configs {
				if cf.Source == 1 && cf.Value != nil { // DYNAMIC_TOPIC_CONFIG: set on the topic
					m[cf.Key] = *cf.Value
				}
			}
			configs[rc.Name] = m
		}
	}
	for _, t := range td.Sorted() {
		d := topicDetail{topicRow: topicRow{Name: t.Topic, ID: topicID(t.ID), Partitions: len(t.Partitions), Internal: t.IsInternal},
			Configs: configs[t.Topic]}
		for _, p := range t.Partitions.Sorted() {
			r := partitionRow{Partition: p.Partition, Leader: p.Leader, Epoch: p.LeaderEpoch, Replicas: p.Replicas, ISR: p.ISR}
			if p.Err != nil {
				r.Error = p.Err.Error()
			}
			d.PartitionsList = append(d.PartitionsList, r)
		}
		out = append(out, d)
	}
	return c.print(out, func(w io.Writer) {
		for i, d := range out {
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "Topic: %s  ID: %s  Partitions: %d  Configs: %s\n", d.Name, d.ID, d.Partitions, joinConfigs(d.Configs))
			fmt.Fprintln(w, "PARTITION\tLEADER\tEPOCH\tREPLICAS\tISR\tERROR")
			for _, p := range d.PartitionsList {
				fmt.Fprintf(w, "%d\t%d\t%d\t%s\t%s\t%s\n", p.Partition, p.Leader, p.Epoch, ints(p.Replicas), ints(p.ISR), orDash(p.Error))
			}
		}
	})
}

// topicID prints a topic id as Kafka's tools do: URL-safe base64, no
// padding.
func topicID(id kadm.TopicID) string { return base64.RawURLEncoding.EncodeToString(id[:]) }

func joinConfigs(m map[string]string) string {
	var kv []string
	for k, v := range m {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

func ints(v []int32) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(int(n))
	}
	return strings.Join(s, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

type topicsCreateCmd struct {
	adminFlags
	Topic      string   `arg:"" help:"The topic."`
	Partitions int32    `name:"partitions" short:"p" default:"-1" help:"Partitions (-1: the cluster's default)."`
	Config     []string `name:"config" short:"c" help:"A topic config, key=value (repeatable)."`
}

func (c *topicsCreateCmd) Run() error {
	configs := map[string]*string{}
	for _, kv := range c.Config {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("--config %q: want key=value", kv)
		}
		configs[k] = &v
	}
	adm, ctx, done, err := c.client()
	if err != nil {
		return err
	}
	defer done()
	r, err := adm.CreateTopic(ctx, c.Partitions, -1, configs, c.Topic)
	if err == nil {
		err = r.Err
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", c.Topic, err)
	}
	return c.print(map[string]any{"topic": r.Topic, "id": topicID(r.ID), "partitions": r.NumPartitions}, func(w io.Writer) {
		fmt.Fprintf(w, "created topic %s with %d partitions\n", r.Topic, r.NumPartitions)
	})
}

type topicsDeleteCmd struct {
	adminFlags
	Topics []string `arg:"" help:"The topics."`
}

func (c *topicsDeleteCmd) Run() error {
	adm, ctx, done, err := c.client()
	if err != nil {
		return err
	}
	defer done()
	rs, err := adm.DeleteTopics(ctx, c.Topics...)
	if err != nil {
		return err
	}
	var failed []string
	for _, r := range rs.Sorted() {
		if r.Err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", r.Topic, r.Err))
		} else if !c.JSON {
			fmt.Printf("deleted topic %s\n", r.Topic)
		}
	}
	if c.JSON {
		_ = c.print(map[string]any{"deleted": len(c.Topics) - len(failed), "errors": failed}, nil)
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

type topicsAddPartitionsCmd struct {
	adminFlags
	Topic      string `arg:"" help:"The topic."`
	Partitions int    `name:"partitions" short:"p" required:"" help:"The new total partition count."`
}

func (c *topicsAddPartitionsCmd) Run() error {
	adm, ctx, done, err := c.client()
	if err != nil {
		return err
	}
	defer done()
	rs, err := adm.UpdatePartitions(ctx, c.Partitions, c.Topic)
	if err != nil {
		return err
	}
	r, ok := rs[c.Topic]
	if !ok {
		return fmt.Errorf("%s: no answer", c.Topic)
	}
	if r.Err != nil {
		return fmt.Errorf("%s: %w", c.Topic, r.Err)
	}
	return c.print(map[string]any{"topic": c.Topic, "partitions": c.Partitions}, func(w io.Writer) {
		fmt.Fprintf(w, "topic %s now has %d partitions\n", c.Topic, c.Partitions)
	})
}

// ---- groups ----

type groupsCmd struct {
	List          groupsListCmd          `cmd:"" help:"List the consumer groups."`
	Describe      groupsDescribeCmd      `cmd:"" help:"Show groups: state, coordinator, members, and per partition the committed offset, end offset and lag."`
	Delete        groupsDeleteCmd        `cmd:"" help:"Delete groups (they must be empty)."`
	ResetOffsets  groupsResetOffsetsCmd  `cmd:"" name:"reset-offsets" help:"Set a group's committed offsets (it must be empty); a dry run without --execute."`
	DeleteOffsets groupsDeleteOffsetsCmd `cmd:"" name:"delete-offsets" help:"Delete a group's committed offsets of topics it does not consume."`
}

type groupsListCmd struct{ adminFlags }

type groupRow struct {
	Group        string `json:"group"`
	State        string `json:"state"`
	Type         string `json:"type"`
	ProtocolType string `json:"protocolType"`
	Coordinator  int32  `json:"coordinator"`
}

func (c *groupsListCmd) Run() error {
	adm, ctx, done, err := c.client()
	if err != nil {
		return err
	}
	defer done()
	lg, err := adm.ListGroups(ctx)
	if err != nil {
		return err
	}
	var rows []groupRow
	for _, g := range lg.Sorted() {
		rows = append(rows, groupRow{Group: g.Group, State: g.State, Type: g.GroupType, ProtocolType: g.ProtocolType, Coordinator: g.Coordinator})
	}
	return c.print(rows, func(w io.Writer) {
		fmt.Fprintln(w, "GROUP\tSTATE\tTYPE\tPROTOCOL-TYPE\tCOORDINATOR")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\n", r.Group, r.State, orDash(r.Type), orDash(r.ProtocolType), r.Coordinator)
		}
	})
}

type groupsDescribeCmd struct {
	adminFlags
	Groups []string `arg:"" help:"The groups."`
}

type memberRow struct {
	MemberID   string   `json:"memberId"`
	InstanceID string   `json:"instanceId,omitempty"`
	ClientID   string   `json:"clientId"`
	Host       string   `json:"host"`
	Assigned   []string `json:"assigned"`
}

type lagRow struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Committed int64  `json:"committed"`
	End       int64  `json:"end"`
	Lag       int64  `json:"lag"`
	MemberID  string `json:"memberId,omitempty"`
	ClientID  string `json:"clientId,omitempty"`
	Error     string `json:"error,omitempty"`
}

type groupDetail struct {
	Group        string      `json:"group"`
	State        string      `json:"state"`
	ProtocolType string      `json:"protocolType"`
	Protocol     string      `json:"protocol"`
	Coordinator  string      `json:"coordinator"`
	Members      []memberRow `json:"members"`
	Offsets      []lagRow    `json:"offsets"`
	TotalLag     int64       `json:"totalLag"`
}

func (c *groupsDescribeCmd) Run() error {
	adm, ctx, done, err := c.client()
	if err != nil {
		return err
	}
	defer done()
	lags, err := adm.Lag(ctx, c.Groups...)
	if err != nil {
		return err
	}
	var out []groupDetail
	for _, g := range c.Groups {
		l, ok := lags[g]
		if !ok {
			return fmt.Errorf("group %s: no answer", g)
		}
		if err := l.Error(); err != nil {
			return fmt.Errorf("group %s: %w", g, err)
		}
		d := groupDetail{Group: g, State: l.State, ProtocolType: l.ProtocolType, Protocol: l.Protocol,
			Coordinator: fmt.Sprintf("%d (%s:%d)", l.Coordinator.NodeID, l.Coordinator.Host, l.Coordinator.Port)}
		for _, m := range l.Members {
			mr := memberRow{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost}
			if m.InstanceID != nil {
				mr.InstanceID = *m.InstanceID
			}
			if a, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range a.Topics {
					for _, p := range t.Partitions {
						mr.Assigned = append(mr.Assigned, fmt.Sprintf("%s-%d", t.Topic, p))
					}
				}
			}
			d.Members = append(d.Members, mr)
		}
		for _, ml := range l.Lag.Sorted() {
			r := lagRow{Topic: ml.Topic, Partition: ml.Partition, Committed: ml.Commit.At, End: ml.End.Offset, Lag: ml.Lag}
			if ml.Member != nil {
				r.MemberID, r.ClientID = ml.Member.MemberID, ml.Member.ClientID
			}
			if ml.Err != nil {
				r.Error = ml.Err.Error()
			}
			if r.Lag > 0 {
				d.TotalLag += r.Lag
			}
			d.Offsets = append(d.Offsets, r)
		}
		out = append(out, d)
	}
	return c.print(out, func(w io.Writer) {
		for i, d := range out {
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "Group: %s  State: %s  Protocol: %s/%s  Coordinator: %s  Lag: %d\n",
				d.Group, d.State, orDash(d.ProtocolType), orDash(d.Protocol), d.Coordinator, d.TotalLag)
			if len(d.Members) > 0 {
				fmt.Fprintln(w, "MEMBER\tINSTANCE\tCLIENT-ID\tHOST\tPARTITIONS")
				for _, m := range d.Members {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", m.MemberID, orDash(m.InstanceID), m.ClientID, m.Host, orDash(strings.Join(m.Assigned, ",")))
				}
			}
			fmt.Fprintln(w, "TOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tCLIENT-ID")
			for _, r := range d.Offsets {
				committed := strconv.FormatInt(r.Committed, 10)
				if r.Committed < 0 {
					committed = "-"
				}
				fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%d\t%s\n", r.Topic, r.Partition, committed, r.End, r.Lag, orDash(r.ClientID))
			}
		}
	})
}

type groupsDeleteCmd struct {
	adminFlags
	Groups []string `arg:"" help:"The groups."`
}

func (c *groupsDeleteCmd) Run() error {
	adm, ctx, done, err := c.client()
	if err != nil {
		return err
	}
	defer done()
	rs, err := adm.DeleteGroups(ctx, c.Groups...)
	if err != nil {
		return err
	}
	var failed []string
	for _, g := range c.Groups {
		if r, ok := rs[g]; !ok || r.Err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", g, r.Err))
		} else if !c.JSON {
			fmt.Printf("deleted group %s\n", g)
		}
	}
	if c.JSON {
		_ = c.print(map[string]any{"deleted": len(c.Groups) - len(failed), "errors": failed}, nil)
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

type groupsResetOffsetsCmd struct {
	adminFlags
	Group      string   `arg:"" help:"The group."`
	Topics     []string `name:"topic" short:"t" required:"" help:"A topic whose offsets to set (repeatable)."`
	ToEarliest bool     `name:"to-earliest" xor:"to" help:"To each partition's log start."`
	ToLatest   bool     `name:"to-latest" xor:"to" help:"To each partition's end."`
	ToOffset   *int64   `name:"to-offset" xor:"to" help:"To this offset (within the log)."`
	Execute    bool     `name:"execute" help:"Commit the new offsets (without it: only show them)."`
}

func (c *groupsResetOffsetsCmd) Validate() error {
	if !c.ToEarliest && !c.ToLatest && c.ToOffset == nil {
		return errors.New("say where to: --to-earliest, --to-latest or --to-offset N")
	}
	return nil
}

func (c *groupsResetOffsetsCmd) Run() error {
	adm, ctx, done, err := c.client()
	if err != nil {
		return err
	}
	defer done()
	starts, err := adm.ListStartOffsets(ctx, c.Topics...)
	if err != nil {
		return err
	}
	ends, err := adm.ListEndOffsets(ctx, c.Topics...)
	if err != nil {
		return err
	}
	var set kadm.Offsets
	var rows []lagRow
	var bad []string
	ends.Each(func(e kadm.ListedOffset) {
		if e.Err != nil {
			bad = append(bad, fmt.Sprintf("%s-%d: %v", e.Topic, e.Partition, e.Err))
			return
		}
		s, _ := starts.Lookup(e.Topic, e.Partition)
		at := s.Offset
		switch {
		case c.ToLatest:
			at = e.Offset
		case c.ToOffset != nil:
			at = min(max(*c.ToOffset, s.Offset), e.Offset)
		}
		set.Add(kadm.Offset{Topic: e.Topic, Partition: e.Partition, At: at, LeaderEpoch: -1})
		rows = append(rows, lagRow{Topic: e.Topic, Partition: e.Partition, Committed: at, End: e.Offset, Lag: e.Offset - at})
	})
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	slices.SortFunc(rows, func(a, b lagRow) int {
		if a.Topic != b.Topic {
			return strings.Compare(a.Topic, b.Topic)
		}
		return int(a.Partition - b.Partition)
	})
	if c.Execute {
		rs, err := adm.CommitOffsets(ctx, c.Group, set)
		if err != nil {
			return fmt.Errorf("group %s: %w", c.Group, err)
		}
		if err := rs.Error(); err != nil {
			return fmt.Errorf("group %s: %w (a group with members cannot be reset; stop its consumers first)", c.Group, err)
		}
	}
	return c.print(map[string]any{"group": c.Group, "executed": c.Execute, "offsets": rows}, func(w io.Writer) {
		if !c.Execute {
			fmt.Fprintln(w, "dry run: nothing committed (add --execute)")
		}
		fmt.Fprintln(w, "TOPIC\tPARTITION\tNEW-OFFSET\tLOG-END-OFFSET\tLAG")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\n", r.Topic, r.Partition, r.Committed, r.End, r.Lag)
		}
	})
}

type groupsDeleteOffsetsCmd struct {
	adminFlags
	Group  string   `arg:"" help:"The group."`
	Topics []string `name:"topic" short:"t" required:"" help:"A topic, or topic:p1,p2 for some partitions (repeatable)."`
}

func (c *groupsDeleteOffsetsCmd) Run() error {
	set := kadm.TopicsSet{}
	for _, t := range c.Topics {
		name, parts, has := strings.Cut(t, ":")
		if !has {
			set.Add(name) // every partition: listed below
			continue
		}
		for _, p := range strings.Split(parts, ",") {
			n, err := strconv.ParseInt(p, 10, 32)
			if err != nil || n < 0 {
				return fmt.Errorf("--topic %q: want topic or topic:p1,p2", t)
			}
			set.Add(name, int32(n))
		}
	}
	adm, ctx, done, err := c.client()
	if err != nil {
		return err
	}
	defer done()
	var whole []string
	for t, ps := range set {
		if len(ps) == 0 {
			whole = append(whole, t)
		}
	}
	if len(whole) > 0 {
		md, err := c.metadata(ctx, whole...)
		if err != nil {
			return err
		}
		for _, t := range md.Topics {
			if t.Err != nil {
				return fmt.Errorf("topic %s: %w", t.Topic, t.Err)
			}
			set.Add(t.Topic, t.Partitions.Numbers()...)
		}
	}
	rs, err := adm.DeleteOffsets(ctx, c.Group, set)
	if err != nil {
		return fmt.Errorf("group %s: %w", c.Group, err)
	}
	type row struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Error     string `json:"error,omitempty"`
	}
	var rows []row
	var failed int
	for t, ps := range rs {
		for p, err := range ps {
			r := row{Topic: t, Partition: p}
			if err != nil {
				r.Error, failed = err.Error(), failed+1
			}
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(a, b row) int {
		if a.Topic != b.Topic {
			return strings.Compare(a.Topic, b.Topic)
		}
		return int(a.Partition - b.Partition)
	})
	if err := c.print(rows, func(w io.Writer) {
		fmt.Fprintln(w, "TOPIC\tPARTITION\tSTATUS")
		for _, r := range rows {
			status := "deleted"
			if r.Error != "" {
				status = r.Error
			}
			fmt.Fprintf(w, "%s\t%d\t%s\n", r.Topic, r.Partition, status)
		}
	}); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d partitions' offsets not deleted", failed)
	}
	return nil
}

// ---- route ----

type routeCmd struct {
	adminFlags
	DataDir string   `name:"data-dir" help:"Read the assignment from this volume instead of asking the cluster; then the answer says why."`
	Groups  []string `arg:"" help:"The groups."`
}

type routeRow struct {
	Group       string `json:"group"`
	Coordinator string `json:"coordinator"`
	NodeID      int32  `json:"nodeId"`
	Why         string `json:"why"`
}

func (c *routeCmd) Run() error {
	var rows []routeRow
	header := ""
	if c.DataDir != "" {
		a, err := cluster.ReadAssignment(volume.AssignmentPath(c.DataDir))
		if err != nil {
			return err
		}
		explicit := map[string]string{}
		for _, g := range a.ConsumerGroups {
			explicit[g.GroupID] = g.Broker
		}
		ids := a.BrokerIDs()
		for _, g := range c.Groups {
			r := routeRow{Group: g, NodeID: -1}
			pref := route.Preferred(g, ids)
			switch b, ok := explicit[g]; {
			case ok:
				r.Coordinator, r.Why = b, fmt.Sprintf("explicit: assignment.json places it on %s (hash slot %s)", b, pref)
			default:
				id, ok := route.Coordinator(g, ids, a.IsAlive)
				switch {
				case !ok:
					r.Why = "no broker is alive"
				case id == pref:
					r.Coordinator, r.Why = id, fmt.Sprintf("hash: slot %d of %d brokers", slices.Index(sortedIDs(ids), pref), len(sortedIDs(ids)))
				default:
					row, _ := a.Row(pref)
					r.Coordinator, r.Why = id, fmt.Sprintf("fallback: its hash slot %s is %s; the highest-weight alive broker answers", pref, row.Health)
				}
			}
			if n, ok := volume.ParseBrokerName(r.Coordinator); ok {
				r.NodeID = n
			}
			rows = append(rows, r)
		}
		header = fmt.Sprintf("assignment: controller epoch %d, version %d, from %s", a.ControllerEpoch, a.AssignmentVersion, c.DataDir)
	} else {
		adm, ctx, done, err := c.client()
		if err != nil {
			return err
		}
		defer done()
		for _, fc := range adm.FindGroupCoordinators(ctx, c.Groups...) {
			r := routeRow{Group: fc.Name, NodeID: fc.NodeID, Coordinator: fmt.Sprintf("%s:%d", fc.Host, fc.Port),
				Why: "asked of the cluster (FindCoordinator); --data-dir says why"}
			if fc.Err != nil {
				r.NodeID, r.Coordinator, r.Why = -1, "", fc.Err.Error()
			}
			rows = append(rows, r)
		}
		slices.SortFunc(rows, func(a, b routeRow) int { return strings.Compare(a.Group, b.Group) })
	}
	return c.print(rows, func(w io.Writer) {
		if header != "" {
			fmt.Fprintln(w, header)
		}
		fmt.Fprintln(w, "GROUP\tCOORDINATOR\tNODE\tWHY")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", r.Group, orDash(r.Coordinator), r.NodeID, r.Why)
		}
	})
}

func sortedIDs(ids []string) []string {
	s := slices.Clone(ids)
	sort.Strings(s)
	return slices.Compact(s)
}

// ---- cluster ----

type clusterCmd struct {
	adminFlags
	DataDir string `name:"data-dir" help:"Also read kaas's assignment from this volume: controller epoch, broker health, partitions and groups per broker."`
}

type brokerRow struct {
	NodeID     int32  `json:"nodeId"`
	Address    string `json:"address"`
	Rack       string `json:"rack,omitempty"`
	Controller bool   `json:"controller"`
	Health     string `json:"health,omitempty"`
	Leads      int    `json:"partitionsLed"`
	Groups     int    `json:"explicitGroups,omitempty"`
}

func (c *clusterCmd) Run() error {
	_, ctx, done, err := c.client()
	if err != nil {
		return err
	}
	defer done()
	md, err := c.metadata(ctx)
	if err != nil {
		return err
	}
	leads := map[int32]int{}
	for _, t := range md.Topics {
		if t.IsInternal { // kaas's hold no records (docs/status.md)
			continue
		}
		for _, p := range t.Partitions {
			leads[p.Leader]++
		}
	}
	var rows []brokerRow
	for _, b := range md.Brokers {
		r := brokerRow{NodeID: b.NodeID, Address: fmt.Sprintf("%s:%d", b.Host, b.Port), Controller: b.NodeID == md.Controller, Leads: leads[b.NodeID]}
		if b.Rack != nil {
			r.Rack = *b.Rack
		}
		rows = append(rows, r)
	}
	out := map[string]any{"clusterId": md.Cluster, "controller": md.Controller}
	var a *cluster.Assignment
	if c.DataDir != "" {
		if a, err = cluster.ReadAssignment(volume.AssignmentPath(c.DataDir)); err != nil {
			return err
		}
		groups := map[string]int{}
		for _, g := range a.ConsumerGroups {
			groups[g.Broker]++
		}
		seen := map[int32]bool{}
		for i := range rows {
			seen[rows[i].NodeID] = true
		}
		for _, br := range a.Brokers {
			if !seen[br.NodeID] {
				rows = append(rows, brokerRow{NodeID: br.NodeID, Address: fmt.Sprintf("%s:%d", br.Host, br.Port)})
			}
		}
		for i := range rows {
			name := volume.BrokerName(rows[i].NodeID)
			if row, ok := a.Row(name); ok {
				rows[i].Health = string(row.Health)
			}
			rows[i].Groups = groups[name]
		}
		out["controllerEpoch"], out["assignmentVersion"], out["assignmentController"] = a.ControllerEpoch, a.AssignmentVersion, a.Controller
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].NodeID < rows[j].NodeID })
	out["brokers"] = rows
	return c.print(out, func(w io.Writer) {
		fmt.Fprintf(w, "cluster %s, controller %d", md.Cluster, md.Controller)
		if a != nil {
			fmt.Fprintf(w, " (%s, epoch %d, assignment version %d)", a.Controller, a.ControllerEpoch, a.AssignmentVersion)
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "NODE\tADDRESS\tHEALTH\tCONTROLLER\tPARTITIONS-LED\tGROUPS-PLACED")
		for _, r := range rows {
			fmt.Fprintf(w, "%d\t%s\t%s\t%v\t%d\t%d\n", r.NodeID, r.Address, orDash(r.Health), r.Controller, r.Leads, r.Groups)
		}
	})
}
