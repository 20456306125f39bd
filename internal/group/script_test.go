package group

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

var update = flag.Bool("update", false, "rewrite the expected output of testdata scripts")

// TestScripts runs every testdata/*.txt script. A script is a sequence of
// blocks separated by blank lines; each block is a command, a "----" line
// and the expected output, one line per response or event. Lines starting
// with # are comments. See testdata/README for the command syntax.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScript(t, f) })
	}
}

type block struct {
	pre  []string // comments and blank lines before the command
	cmd  string
	want []string
}

func parseScript(t *testing.T, path string) []block {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []block
	var cur block
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	state := 0 // 0: before command, 1: after command, 2: in expected output
	for sc.Scan() {
		line := sc.Text()
		switch state {
		case 0:
			if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
				cur.pre = append(cur.pre, line)
				continue
			}
			cur.cmd = line
			state = 1
		case 1:
			if line != "----" {
				t.Fatalf("%s: command %q not followed by ----", path, cur.cmd)
			}
			state = 2
		case 2:
			if strings.TrimSpace(line) == "" {
				blocks = append(blocks, cur)
				cur = block{pre: []string{line}}
				state = 0
				continue
			}
			cur.want = append(cur.want, line)
		}
	}
	if state == 1 {
		t.Fatalf("%s: last command has no ----", path)
	}
	if state == 2 {
		blocks = append(blocks, cur)
	}
	return blocks
}

func runScript(t *testing.T, path string) {
	blocks := parseScript(t, path)
	r := newRunner()
	var rewritten strings.Builder
	for _, b := range blocks {
		got := r.exec(b.cmd)
		for _, e := range r.shell.errs {
			t.Errorf("%s: after %q: %v", path, b.cmd, e)
		}
		r.shell.errs = nil
		if !*update && strings.Join(got, "\n") != strings.Join(b.want, "\n") {
			t.Errorf("%s: %s\n--- got\n%s\n--- want\n%s", path, b.cmd, strings.Join(got, "\n"), strings.Join(b.want, "\n"))
		}
		for _, p := range b.pre {
			rewritten.WriteString(p + "\n")
		}
		rewritten.WriteString(b.cmd + "\n----\n")
		for _, l := range got {
			rewritten.WriteString(l + "\n")
		}
	}
	if *update {
		if err := os.WriteFile(path, []byte(rewritten.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

type runner struct {
	g     *Group
	shell *fakeShell
	ids   map[string]int
}

func newRunner() *runner {
	r := &runner{}
	r.configure(nil)
	return r
}

func (r *runner) configure(args map[string]string) {
	cfg := DefaultConfig()
	r.ids = map[string]int{}
	cfg.NewMemberID = func(prefix string) string {
		r.ids[prefix]++
		return fmt.Sprintf("%s-%d", prefix, r.ids[prefix])
	}
	id := "g1"
	for k, v := range args {
		switch k {
		case "delay":
			cfg.InitialRebalanceDelay = dur(v)
		case "min":
			cfg.MinSessionTimeout = dur(v)
		case "max":
			cfg.MaxSessionTimeout = dur(v)
		case "maxsize":
			cfg.MaxSize, _ = strconv.Atoi(v)
		case "newjoin":
			cfg.NewMemberJoinTimeout = dur(v)
		case "id":
			id = v
		default:
			panic("config: unknown key " + k)
		}
	}
	r.g = New(id, cfg)
	r.shell = newFakeShell(r.g, t0)
}

func dur(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}

func i32(s string) int32 {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return int32(n)
}

// fields splits "cmd k=v k=v flag" into the command, the key/values (keys
// may repeat: values joined by space) and bare flags.
func fields(line string) (string, map[string]string, map[string]bool) {
	parts := strings.Fields(line)
	kv := map[string]string{}
	flags := map[string]bool{}
	for _, p := range parts[1:] {
		if k, v, ok := strings.Cut(p, "="); ok {
			if old, dup := kv[k]; dup {
				v = old + " " + v
			}
			kv[k] = v
		} else {
			flags[p] = true
		}
	}
	return parts[0], kv, flags
}

func optStr(kv map[string]string, k string) *string {
	if v, ok := kv[k]; ok {
		return &v
	}
	return nil
}

// protocols parses p=name[:metadata],name... ; topics=a,b makes every
// protocol's metadata a consumer subscription to those topics.
func protocols(kv map[string]string) []Protocol {
	spec, ok := kv["p"]
	if !ok {
		spec = "range"
	}
	if spec == "-" {
		return nil
	}
	var ps []Protocol
	for _, s := range strings.Split(spec, ",") {
		name, md, _ := strings.Cut(s, ":")
		p := Protocol{Name: name, Metadata: []byte(md)}
		if topics, ok := kv["topics"]; ok {
			m := kmsg.NewConsumerMemberMetadata()
			m.Topics = strings.Split(topics, ",")
			p.Metadata = m.AppendTo(nil)
		}
		ps = append(ps, p)
	}
	return ps
}

func (r *runner) ref(kv map[string]string, fallback ...string) string {
	if v, ok := kv["r"]; ok {
		return v
	}
	for _, f := range fallback {
		if f != "" {
			return f
		}
	}
	return "req"
}

func (r *runner) exec(line string) []string {
	cmd, kv, flags := fields(line)
	s := r.shell
	var out Output
	var lines []string
	switch cmd {
	case "config":
		r.configure(kv)
		return nil
	case "join":
		in := JoinInput{
			Version: 9, MemberID: kv["m"], InstanceID: optStr(kv, "i"),
			ProtocolType: "consumer", Protocols: protocols(kv),
			SessionTimeout: 10 * time.Second, RebalanceTimeout: 30 * time.Second,
			ClientID: "c", ClientHost: "/10.0.0.1", Reason: kv["reason"],
		}
		if v, ok := kv["v"]; ok {
			in.Version = int16(i32(v))
		}
		if v, ok := kv["c"]; ok {
			in.ClientID = v
		}
		if v, ok := kv["t"]; ok {
			in.ProtocolType = v
			if v == "-" {
				in.ProtocolType = ""
			}
		}
		if v, ok := kv["s"]; ok {
			in.SessionTimeout = dur(v)
		}
		if v, ok := kv["rb"]; ok {
			in.RebalanceTimeout = dur(v)
		}
		in.Ref = r.ref(kv, in.MemberID, kv["i"], in.ClientID)
		s.request("join", in.Ref)
		out = r.g.Join(s.now, in)
	case "sync":
		in := SyncInput{MemberID: kv["m"], InstanceID: optStr(kv, "i"), Generation: i32(kv["g"]),
			ProtocolType: optStr(kv, "t"), Protocol: optStr(kv, "n")}
		if a, ok := kv["a"]; ok {
			for _, e := range strings.Split(a, ",") {
				id, asg, _ := strings.Cut(e, ":")
				in.Assignments = append(in.Assignments, Assignment{MemberID: id, Assignment: []byte(asg)})
			}
		}
		in.Ref = r.ref(kv, in.MemberID)
		s.request("sync", in.Ref)
		out = r.g.Sync(s.now, in)
	case "hb":
		in := HeartbeatInput{MemberID: kv["m"], InstanceID: optStr(kv, "i"), Generation: i32(kv["g"])}
		in.Ref = r.ref(kv, in.MemberID)
		s.request("heartbeat", in.Ref)
		out = r.g.Heartbeat(s.now, in)
	case "leave":
		// m=id, m=id@inst, m=@inst; repeated for v3+.
		in := LeaveInput{Version: 5}
		if v, ok := kv["v"]; ok {
			in.Version = int16(i32(v))
		}
		for _, w := range strings.Fields(kv["m"]) {
			id, inst, hasInst := strings.Cut(w, "@")
			lm := LeaveMember{MemberID: id, Reason: kv["reason"]}
			if hasInst {
				lm.InstanceID = &inst
			}
			in.Members = append(in.Members, lm)
		}
		in.Ref = r.ref(kv, "leave")
		s.request("leave", in.Ref)
		out = r.g.Leave(s.now, in)
	case "commit":
		in := CommitCheck{MemberID: kv["m"], InstanceID: optStr(kv, "i"), Generation: -1, Transactional: flags["txn"]}
		if v, ok := kv["g"]; ok {
			in.Generation = i32(v)
		}
		var code Code
		code, out = r.g.CheckCommit(s.now, in)
		lines = append(lines, "commit: "+ErrName(code))
	case "tick":
		var d time.Duration
		for f := range flags {
			d = dur(f)
		}
		s.advance(d, func(a TimerArm, o Output) {
			lines = append(lines, fmt.Sprintf("@%s fire %s", a.At.Sub(t0), a.Key))
			lines = append(lines, r.render(o)...)
		})
		return lines
	case "fire", "fire-stale":
		// fire Kind[member]: the shell delivers the slot's timer now
		// (fire-stale: with an outdated sequence number).
		var key TimerKey
		for f := range flags {
			key = parseKey(f)
		}
		a, ok := s.timers[key]
		seq := a.Seq
		if cmd == "fire-stale" {
			seq--
		} else if !ok {
			return []string{"not armed"}
		} else {
			delete(s.timers, key)
		}
		out = r.g.Timer(s.now, key, seq)
	case "unload":
		out = r.g.Unload()
	case "delete":
		var code Code
		code, out = r.g.Delete()
		lines = append(lines, "delete: "+ErrName(code))
	case "state":
		return []string{fmt.Sprintf("%s gen=%d leader=%s proto=%s members=%s", r.g.State(), r.g.Generation(), dash(r.g.Leader()), dash(r.g.Protocol()), r.memberList())}
	case "timers":
		for _, a := range r.g.Armed() {
			lines = append(lines, fmt.Sprintf("%s in %s", a.Key, a.At.Sub(s.now)))
		}
		return lines
	case "parked":
		return sortedRefs(s.open)
	case "describe":
		d := r.g.Describe()
		lines = append(lines, fmt.Sprintf("state=%s type=%s proto=%s", d.State, dash(d.ProtocolType), dash(d.Protocol)))
		for _, m := range d.Members {
			inst := "-"
			if m.InstanceID != nil {
				inst = *m.InstanceID
			}
			lines = append(lines, fmt.Sprintf("  %s inst=%s client=%s host=%s md=%s assign=%s", m.MemberID, inst, m.ClientID, m.ClientHost, dash(string(m.Metadata)), dash(string(m.Assignment))))
		}
		return lines
	case "topics":
		ts, known := r.g.Topics()
		return []string{fmt.Sprintf("topics=%s known=%v", dash(strings.Join(ts, ",")), known)}
	case "subscribed":
		var res []string
		for _, f := range strings.Fields(line)[1:] {
			res = append(res, fmt.Sprintf("%s=%v", f, r.g.IsSubscribed(f)))
		}
		return res
	default:
		panic("unknown command " + cmd)
	}
	lines = append(lines, r.render(out)...)
	s.apply(out)
	return lines
}

func parseKey(s string) TimerKey {
	name, member, _ := strings.Cut(strings.TrimSuffix(s, "]"), "[")
	for k := TimerSession; k <= TimerSyncTimeout; k++ {
		if k.String() == name {
			return TimerKey{Kind: k, Member: member}
		}
	}
	panic("unknown timer " + s)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (r *runner) memberList() string {
	var ids []string
	for _, m := range r.g.Describe().Members {
		ids = append(ids, m.MemberID)
	}
	return dash(strings.Join(ids, ","))
}

func deref(p *string) string {
	if p == nil {
		return "nil"
	}
	return *p
}

// render prints an Output: responses, then the notable events.
func (r *runner) render(out Output) []string {
	var lines []string
	for _, j := range out.Joins {
		if j.Err != ErrNone {
			lines = append(lines, fmt.Sprintf("join %v: %s m=%s", j.Ref, ErrName(j.Err), dash(j.MemberID)))
			continue
		}
		l := fmt.Sprintf("join %v: NONE m=%s gen=%d type=%s proto=%s leader=%s", j.Ref, j.MemberID, j.Generation, deref(j.ProtocolType), deref(j.Protocol), j.Leader)
		if j.SkipAssignment {
			l += " skip"
		}
		if j.Members != nil {
			var ms []string
			for _, m := range j.Members {
				s := m.MemberID
				if m.InstanceID != nil {
					s += "@" + *m.InstanceID
				}
				if len(m.Metadata) > 0 && m.Metadata[0] >= ' ' {
					s += ":" + string(m.Metadata)
				}
				ms = append(ms, s)
			}
			l += " members=" + strings.Join(ms, ",")
		}
		lines = append(lines, l)
	}
	for _, s := range out.Syncs {
		if s.Err != ErrNone {
			lines = append(lines, fmt.Sprintf("sync %v: %s", s.Ref, ErrName(s.Err)))
			continue
		}
		lines = append(lines, fmt.Sprintf("sync %v: NONE assign=%s type=%s proto=%s", s.Ref, dash(string(s.Assignment)), deref(s.ProtocolType), deref(s.Protocol)))
	}
	for _, h := range out.Heartbeats {
		lines = append(lines, fmt.Sprintf("hb %v: %s", h.Ref, ErrName(h.Err)))
	}
	for _, l := range out.Leaves {
		var ms []string
		for _, m := range l.Members {
			w := m.MemberID
			if m.InstanceID != nil {
				w += "@" + *m.InstanceID
			}
			ms = append(ms, w+":"+ErrName(m.Err))
		}
		lines = append(lines, fmt.Sprintf("leave %v: %s [%s]", l.Ref, ErrName(l.Err), strings.Join(ms, " ")))
	}
	for _, e := range out.Events {
		switch e.Kind {
		case EventStateChange:
			lines = append(lines, fmt.Sprintf("  state %s -> %s", e.From, e.To))
		case EventRebalance:
			lines = append(lines, "  rebalance: "+e.Reason)
		case EventGeneration:
			lines = append(lines, fmt.Sprintf("  generation %d leader=%s %s", e.Gen, e.Member, e.Reason))
		case EventMemberAdded:
			lines = append(lines, "  +member "+e.Member)
		case EventMemberRemoved:
			lines = append(lines, fmt.Sprintf("  -member %s (%s)", dash(e.Member), e.Reason))
		case EventMemberReplaced:
			lines = append(lines, fmt.Sprintf("  replaced %s: %s -> %s", e.Instance, e.OldMember, e.Member))
		case EventPendingAdded:
			lines = append(lines, "  +pending "+e.Member)
		case EventPendingRemoved:
			lines = append(lines, fmt.Sprintf("  -pending %s (%s)", e.Member, e.Reason))
		case EventBug:
			lines = append(lines, "  BUG "+e.Reason)
		}
	}
	return lines
}
