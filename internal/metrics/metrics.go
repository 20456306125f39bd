// Package metrics is one broker's Prometheus metrics, in the broker's own
// registry (a process may run several brokers: kaas dev, the test
// harnesses). The request path, the coordinator and the cluster runtime
// report through a *Broker; every method is safe on a nil *Broker, which
// records nothing. Gauges that describe state (groups, the assignment) are
// computed when scraped, from functions the node supplies. Names and labels:
// docs/operations.md.
package metrics

import (
	"encoding/binary"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Broker is one broker's metrics.
type Broker struct {
	Registry *prometheus.Registry

	requests     *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	connections  prometheus.Gauge
	refused      *prometheus.CounterVec
	bytesIn      prometheus.Counter
	recordsIn    prometheus.Counter
	bytesOut     prometheus.Counter
	durable      *prometheus.HistogramVec
	commits      prometheus.Counter
	groupMoves   *prometheus.CounterVec
	groupLoads   prometheus.Counter
	groupLoad    prometheus.Histogram
	applyLatency prometheus.Histogram
	recordsOut   prometheus.Counter
	generations  *prometheus.CounterVec
	corrupt      prometheus.Counter
	clientErrors *prometheus.CounterVec
	panics       *prometheus.CounterVec
}

// latencyBuckets span a cached answer (100 µs) to a long poll (30 s).
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2.5, 14)

// New makes a broker's registry with the Go runtime's and the process's
// collectors and every kaas metric.
func New() *Broker {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m := &Broker{Registry: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kaas_requests_total",
			Help: "Kafka requests answered, by API, version and the first error code in the answer (NONE when there is none)."},
			[]string{"api", "version", "error"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kaas_request_duration_seconds",
			Help: "Time from a request's arrival to its answer being ready, by API (long polls included).", Buckets: latencyBuckets},
			[]string{"api"}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kaas_connections",
			Help: "Open client connections."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kaas_connections_refused_total",
			Help: "Connections closed at accept over a limit (max.connections, max.connections.per.ip)."}, []string{"limit"}),
		bytesIn: prometheus.NewCounter(prometheus.CounterOpts{Name: "kaas_produce_bytes_total",
			Help: "Record batch bytes appended by Produce."}),
		recordsIn: prometheus.NewCounter(prometheus.CounterOpts{Name: "kaas_produce_records_total",
			Help: "Records appended by Produce."}),
		bytesOut: prometheus.NewCounter(prometheus.CounterOpts{Name: "kaas_fetch_bytes_total",
			Help: "Record bytes returned by Fetch."}),
		durable: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kaas_durable_write_duration_seconds",
			Help:    "Time for a write to become durable on the volume: a partition log's fsync for acks=all (file=log), a group file's write (file=group).",
			Buckets: latencyBuckets}, []string{"file"}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{Name: "kaas_offset_commits_total",
			Help: "Partition offsets committed (OffsetCommit and committed TxnOffsetCommit)."}),
		groupMoves: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kaas_group_moves_total",
			Help: "Resident consumer groups an applied assignment routed away from this broker (direction=lost)."},
			[]string{"direction"}),
		groupLoads: prometheus.NewCounter(prometheus.CounterOpts{Name: "kaas_group_loads_total",
			Help: "Group states read from the volume on first touch: after a move here, a takeover, or an idle eviction."}),
		groupLoad: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kaas_group_load_duration_seconds",
			Help: "Time to load a group's durable state on first touch at its new owner.", Buckets: latencyBuckets}),
		applyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kaas_assignment_apply_duration_seconds",
			Help: "Time to apply a new assignment on this broker (orphan sweep, ownership swap, leadership moves).", Buckets: latencyBuckets}),
		recordsOut: prometheus.NewCounter(prometheus.CounterOpts{Name: "kaas_fetch_records_total",
			Help: "Records returned by Fetch (transaction markers not counted)."}),
		generations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kaas_group_generations_total",
			Help: "Rebalances: generations formed by classic groups and group epochs bumped by consumer groups coordinated here (a group loaded after a move is not counted)."},
			[]string{"type"}),
		clientErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kaas_client_errors_total",
			Help: "Connections closed for what the client sent: kind=unreadable_frame (a size or header that cannot be read), bad_request (an API, version or body that cannot be decoded), not_ready (a request before the broker serves clients), panic (a handler panicked again). Their WARN lines are logged at most once a second per kind."},
			[]string{"kind"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kaas_request_panics_total",
			Help: "Requests whose handling panicked, by API: the connection was closed and the broker kept serving; the first stack of each API is logged at ERROR."},
			[]string{"api"}),
		corrupt: prometheus.NewCounter(prometheus.CounterOpts{Name: "kaas_group_files_corrupt_total",
			Help: "Group files found that cannot be decoded (once per version of a file); DeleteGroups moves one aside (docs/operations.md)."}),
	}
	for _, c := range []prometheus.Collector{m.corrupt, m.clientErrors, m.panics, m.requests, m.latency, m.connections, m.refused, m.bytesIn, m.recordsIn, m.bytesOut,
		m.durable, m.commits, m.groupMoves, m.groupLoads, m.groupLoad, m.applyLatency, m.recordsOut, m.generations} {
		f(c)
	}
	// Series that exist from the start, so that a rate over them is 0, not
	// absent, on a broker that has seen none yet.
	for _, typ := range []string{"classic", "consumer"} {
		m.generations.WithLabelValues(typ)
	}
	m.groupMoves.WithLabelValues("lost")
	return m
}

// Request records one answered request: resp's first error code, found in
// the answer's error code fields down to its partitions. key -1 is labelled
// "unknown" and version -1 "unsupported" (the broker passes them for keys
// and versions it does not serve, so that the labels stay a closed set).
func (m *Broker) Request(key, version int16, resp kmsg.Response, d time.Duration) {
	if m == nil {
		return
	}
	api, ver := apiLabel(key), "unsupported"
	if version >= 0 {
		ver = strconv.Itoa(int(version))
	}
	code := int16(0)
	if resp != nil {
		code = FirstError(resp)
	}
	name := "NONE"
	if code != 0 {
		if e := kerr.ErrorForCode(code); e != nil {
			if ke, ok := e.(*kerr.Error); ok {
				name = ke.Message
			} else {
				name = strconv.Itoa(int(code))
			}
		}
	}
	m.requests.WithLabelValues(api, ver, name).Inc()
	m.latency.WithLabelValues(api).Observe(d.Seconds())
	if f, ok := resp.(*kmsg.FetchResponse); ok {
		n, records := 0, 0
		for _, t := range f.Topics {
			for _, p := range t.Partitions {
				n += len(p.RecordBatches)
				records += Records(p.RecordBatches)
			}
		}
		m.bytesOut.Add(float64(n))
		m.recordsOut.Add(float64(records))
	}
}

// Records counts the records of the v2 record batches in b (a Fetch
// answer's partition records: whole batches, the last one possibly cut
// short, which is not counted). Control batches (transaction markers) are
// skipped.
func Records(b []byte) int {
	const countAt = 57 // base offset 8, length 4, leader epoch 4, magic 1, crc 4, attributes 2, last offset delta 4, timestamps 16, producer id 8, epoch 2, base sequence 4
	n := 0
	for len(b) >= countAt+4 {
		size := 12 + int(int32(binary.BigEndian.Uint32(b[8:12])))
		if size < countAt+4 || size > len(b) {
			break
		}
		if binary.BigEndian.Uint16(b[21:23])&0x20 == 0 { // attributes: not a control batch
			n += int(int32(binary.BigEndian.Uint32(b[countAt:])))
		}
		b = b[size:]
	}
	return n
}

// Generation counts a generation formed by a classic group or a group
// epoch bumped by a consumer group (typ "classic" or "consumer").
func (m *Broker) Generation(typ string) {
	if m != nil {
		m.generations.WithLabelValues(typ).Inc()
	}
}

// Connections adds delta to the open connections.
func (m *Broker) Connections(delta int) {
	if m != nil {
		m.connections.Add(float64(delta))
	}
}

// Refused counts a connection closed over limit.
func (m *Broker) Refused(limit string) {
	if m != nil {
		m.refused.WithLabelValues(limit).Inc()
	}
}

// Produced counts an appended batch.
func (m *Broker) Produced(bytes, records int) {
	if m != nil {
		m.bytesIn.Add(float64(bytes))
		m.recordsIn.Add(float64(records))
	}
}

// Durable records how long a write took to become durable; file is "log"
// or "group".
func (m *Broker) Durable(file string, d time.Duration) {
	if m != nil {
		m.durable.WithLabelValues(file).Observe(d.Seconds())
	}
}

// Committed counts committed partition offsets.
func (m *Broker) Committed(partitions int) {
	if m != nil {
		m.commits.Add(float64(partitions))
	}
}

// GroupLoaded records a group's durable state read on first touch (after
// a move, a takeover, or an idle eviction), and how long it took.
func (m *Broker) GroupLoaded(load time.Duration) {
	if m != nil {
		m.groupLoads.Inc()
		m.groupLoad.Observe(load.Seconds())
	}
}

// RequestPanic records a request whose handling panicked; key -1 is
// labelled "unknown".
func (m *Broker) RequestPanic(key int16) {
	if m == nil {
		return
	}
	m.panics.WithLabelValues(apiLabel(key)).Inc()
}

// apiLabel is the api label of key: its Kafka name, "unknown" for -1.
func apiLabel(key int16) string {
	if key < 0 {
		return "unknown"
	}
	return kmsg.NameForKey(key)
}

// ClientError records a connection closed for what its client sent; kind is
// one of a closed set (unreadable_frame, bad_request, not_ready).
func (m *Broker) ClientError(kind string) {
	if m != nil {
		m.clientErrors.WithLabelValues(kind).Inc()
	}
}

// GroupFileCorrupt records a group file that cannot be decoded.
func (m *Broker) GroupFileCorrupt(string) {
	if m != nil {
		m.corrupt.Inc()
	}
}

// GroupsLost records groups an assignment routed away from this broker.
func (m *Broker) GroupsLost(n int) {
	if m != nil && n > 0 {
		m.groupMoves.WithLabelValues("lost").Add(float64(n))
	}
}

// Applied records the time an assignment took to apply.
func (m *Broker) Applied(d time.Duration) {
	if m != nil {
		m.applyLatency.Observe(d.Seconds())
	}
}

// GroupStat is one resident group, for the groups gauges.
type GroupStat struct {
	Type    string // classic or consumer
	State   string // Kafka's state name: Empty, Stable, PreparingRebalance, ...
	Members int
}

// ClusterStat is what this broker knows of the cluster.
type ClusterStat struct {
	ControllerEpoch   int64
	AssignmentVersion int64
	Controller        bool           // this broker holds the controller role
	Ready             bool           // it serves clients (/readyz)
	Brokers           map[string]int // broker count by health: alive, draining, dead
	Partitions        int            // partitions this broker leads
}

// Observe registers the gauges computed at scrape time. Call once.
func (m *Broker) Observe(groups func() []GroupStat, cluster func() ClusterStat) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(&stateCollector{groups: groups, cluster: cluster})
}

var (
	groupsDesc = prometheus.NewDesc("kaas_groups", "Consumer groups coordinated by this broker and held in memory, by type and state.",
		[]string{"type", "state"}, nil)
	membersDesc = prometheus.NewDesc("kaas_group_members", "Members of the groups coordinated by this broker, by group type.",
		[]string{"type"}, nil)
	epochDesc      = prometheus.NewDesc("kaas_controller_epoch", "Controller epoch of the assignment this broker acts on.", nil, nil)
	versionDesc    = prometheus.NewDesc("kaas_assignment_version", "Version of the assignment this broker acts on.", nil, nil)
	controllerDesc = prometheus.NewDesc("kaas_controller", "1 while this broker holds the controller role.", nil, nil)
	readyDesc      = prometheus.NewDesc("kaas_ready", "1 while this broker serves clients (what /readyz answers).", nil, nil)
	brokersDesc    = prometheus.NewDesc("kaas_brokers", "Brokers in the assignment this broker acts on, by health.", []string{"health"}, nil)
	leadsDesc      = prometheus.NewDesc("kaas_partitions_led", "Partitions this broker leads.", nil, nil)
)

type stateCollector struct {
	groups  func() []GroupStat
	cluster func() ClusterStat
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{groupsDesc, membersDesc, epochDesc, versionDesc, controllerDesc, readyDesc, brokersDesc, leadsDesc} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ typ, state string }
	counts := map[key]int{}
	members := map[string]int{"classic": 0, "consumer": 0}
	for _, g := range c.groups() {
		counts[key{g.Type, g.State}]++
		members[g.Type] += g.Members
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(groupsDesc, prometheus.GaugeValue, float64(n), k.typ, k.state)
	}
	for t, n := range members {
		ch <- prometheus.MustNewConstMetric(membersDesc, prometheus.GaugeValue, float64(n), t)
	}
	cs := c.cluster()
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	ch <- prometheus.MustNewConstMetric(epochDesc, prometheus.GaugeValue, float64(cs.ControllerEpoch))
	ch <- prometheus.MustNewConstMetric(versionDesc, prometheus.GaugeValue, float64(cs.AssignmentVersion))
	ch <- prometheus.MustNewConstMetric(controllerDesc, prometheus.GaugeValue, b(cs.Controller))
	ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, b(cs.Ready))
	for _, h := range []string{"alive", "draining", "dead"} {
		ch <- prometheus.MustNewConstMetric(brokersDesc, prometheus.GaugeValue, float64(cs.Brokers[h]), h)
	}
	ch <- prometheus.MustNewConstMetric(leadsDesc, prometheus.GaugeValue, float64(cs.Partitions))
}

// FirstError is the first non-zero error code of a Kafka answer: its
// top-level ErrorCode, else the first of its topics', partitions' or
// groups' (three levels deep), else 0.
func FirstError(resp kmsg.Response) int16 {
	return firstError(reflect.ValueOf(resp), 3)
}

// shape caches, per struct type, where its error code and nested lists are.
type shape struct {
	code  int   // index of an int16 ErrorCode field, or -1
	lists []int // slice-of-struct fields
	nests []int // struct or pointer-to-struct fields
}

var shapes sync.Map // reflect.Type → *shape

func shapeOf(t reflect.Type) *shape {
	if s, ok := shapes.Load(t); ok {
		return s.(*shape)
	}
	s := &shape{code: -1}
	for i := range t.NumField() {
		f := t.Field(i)
		switch {
		case f.Name == "ErrorCode" && f.Type.Kind() == reflect.Int16:
			s.code = i
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			s.lists = append(s.lists, i)
		case f.Type.Kind() == reflect.Struct,
			f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct:
			s.nests = append(s.nests, i)
		}
	}
	shapes.Store(t, s)
	return s
}

func firstError(v reflect.Value, depth int) int16 {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return 0
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return 0
	}
	s := shapeOf(v.Type())
	if s.code >= 0 {
		if c := int16(v.Field(s.code).Int()); c != 0 {
			return c
		}
	}
	if depth == 0 {
		return 0
	}
	for _, i := range s.nests {
		if c := firstError(v.Field(i), depth-1); c != 0 {
			return c
		}
	}
	for _, i := range s.lists {
		l := v.Field(i)
		for j := range l.Len() {
			if c := firstError(l.Index(j), depth-1); c != 0 {
				return c
			}
		}
	}
	return 0
}
