package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"sort"
	"sync"
	"syscall"
	"time"
)

// Peer liveness over the network (docs/cluster.md, "Liveness"). Every
// broker sends its Report to every other broker it knows, every report
// interval, as an HTTP POST to the peer's cluster listener; the answer is the
// peer's own view (peerAck). Liveness, the controller's lease and the
// freshness of a broker's view are judged from what arrives over the
// network, on the receiver's clock, so they do not depend on how soon one
// client of a network file system sees another's writes. The report files
// on the volume stay: they are how brokers find each other's addresses at
// start and what a new controller inherits; evidence from either source
// counts.
const (
	reportRoute     = "/kaas/v1/report"
	assignmentRoute = "/kaas/v1/assignment"
	maxReportBytes  = 4 << 20
)

// peerAck is a broker's answer to a report: what it acts on and knows.
type peerAck struct {
	ID             string `json:"id"`
	Leader         bool   `json:"leader"`
	KnownEpoch     int64  `json:"knownEpoch"`
	AppliedEpoch   int64  `json:"appliedEpoch"`
	AppliedVersion int64  `json:"appliedVersion"`
}

// ackState is the last answer of one peer and when the report it answered
// was sent (this broker's clock).
type ackState struct {
	sentAt time.Time
	ack    peerAck
}

// queuedReport is a report waiting for its peer's previous one to end.
type queuedReport struct {
	data   []byte
	sentAt time.Time
}

// refusal is a report a peer's address refused a connection for: nothing
// listens there, so the process that last reported from it is gone.
type refusal struct {
	sentAt time.Time
	addr   string
}

// peers is the runtime's network side: the cluster listener and the
// reports sent to and received from the other brokers. Its goroutines (the
// HTTP server and one sender per peer at a time) are owned by it and ended
// by close.
type peers struct {
	me     string
	log    *slog.Logger
	ln     net.Listener
	addr   string // the address peers reach this listener at
	srv    *http.Server
	client *http.Client
	// status answers a report: this broker's own view (set before serve).
	status func() peerAck
	// assignment is the assignment this broker acts on (nil before one).
	assignment func() *Assignment

	mu       sync.Mutex // guards the fields below
	inbox    map[string]Report
	addrs    map[string]string // broker id -> cluster address
	acks     map[string]ackState
	inflight map[string]bool
	// queued is, per peer, the newest report broadcast while the previous
	// one to that peer was still in flight: its sender posts it next.
	queued  map[string]queuedReport
	refused map[string]refusal
	closed  bool

	wg sync.WaitGroup
}

// listenPeers binds the cluster listener on addr. Peers reach it at its
// bound address, with host in place of an unspecified one (0.0.0.0, ::).
func listenPeers(me, addr, host string, timeout time.Duration, log *slog.Logger) (*peers, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cluster: listen %s: %w", addr, err)
	}
	adv := ln.Addr().String()
	if ta, ok := ln.Addr().(*net.TCPAddr); ok && ta.IP.IsUnspecified() && host != "" {
		adv = net.JoinHostPort(host, fmt.Sprint(ta.Port))
	}
	p := &peers{me: me, log: log, ln: ln, addr: adv,
		client: &http.Client{Timeout: timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute}},
		inbox:  map[string]Report{}, addrs: map[string]string{}, acks: map[string]ackState{}, inflight: map[string]bool{}, queued: map[string]queuedReport{}, refused: map[string]refusal{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+reportRoute, p.handleReport)
	mux.HandleFunc("GET "+assignmentRoute, p.handleAssignment)
	mux.HandleFunc("GET "+statusRoute, p.handleStatus)
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	return p, nil
}

// Addr is the address peers reach this listener at.
func (p *peers) Addr() string { return p.addr }

// serve runs the HTTP server until close.
func (p *peers) serve() {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := p.srv.Serve(p.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Warn("cluster listener stopped", "err", err)
		}
	}()
}

// close stops the server and waits for the senders.
func (p *peers) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
	_ = p.srv.Close()
	p.wg.Wait()
	p.client.CloseIdleConnections()
}

func (p *peers) handleReport(w http.ResponseWriter, req *http.Request) {
	var rep Report
	if err := json.NewDecoder(io.LimitReader(req.Body, maxReportBytes)).Decode(&rep); err != nil || rep.ID == "" {
		http.Error(w, "bad report", http.StatusBadRequest)
		return
	}
	p.receive(rep)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(p.status())
}

func (p *peers) handleStatus(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(p.status())
}

func (p *peers) handleAssignment(w http.ResponseWriter, _ *http.Request) {
	a := p.assignment()
	if a == nil {
		http.Error(w, "no assignment yet", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(a)
}

// receive keeps the newest report of each broker and learns its address.
func (p *peers) receive(rep Report) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.inbox[rep.ID]; !ok || old.Incarnation != rep.Incarnation || rep.Seq > old.Seq {
		p.inbox[rep.ID] = rep
	}
	if rep.ClusterAddr != "" && rep.ID != p.me {
		p.addrs[rep.ID] = rep.ClusterAddr
	}
}

// learn records the cluster addresses found in report files.
func (p *peers) learn(reports map[string]Report) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, rep := range reports {
		if id != p.me && rep.ClusterAddr != "" && rep.State != StateStopped {
			if _, ok := p.addrs[id]; !ok {
				p.addrs[id] = rep.ClusterAddr
			}
		}
	}
}

// forget drops a broker removed from the cluster.
func (p *peers) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.addrs, id)
	delete(p.inbox, id)
	delete(p.acks, id)
	delete(p.queued, id)
	delete(p.refused, id)
}

// refusedSince reports whether the last report sent to id's current
// address was refused (nothing listens there), and when it was sent.
func (p *peers) refusedSince(id string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.refused[id]
	if !ok || r.addr != p.addrs[id] {
		return time.Time{}, false
	}
	return r.sentAt, true
}

// received returns a copy of the newest report of each broker.
func (p *peers) received() map[string]Report {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.inbox)
}

// lastAcks returns a copy of every peer's last answer.
func (p *peers) lastAcks() map[string]ackState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.acks)
}

// broadcast sends rep to every known peer, one request in flight per peer.
// A peer still answering the previous one is slow (or gone): rep waits, in
// place of any older report waiting, and its sender posts it as soon as
// that answer ends, so one slow answer costs the peer's view of this broker
// the time it took, not a whole report interval more. It does not wait for
// the answers.
func (p *peers) broadcast(rep Report, now time.Time) {
	data, err := json.Marshal(rep)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	ids := make([]string, 0, len(p.addrs))
	for id := range p.addrs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if p.inflight[id] {
			p.queued[id] = queuedReport{data: data, sentAt: now}
			continue
		}
		p.inflight[id] = true
		p.wg.Add(1)
		go p.send(id, p.addrs[id], data, now)
	}
}

// send posts reports to one peer, starting with data, and goes on with
// the report queued meanwhile (broadcast) until none is; it records each
// answer. Runs as the peer's one sender (close waits for it); each post is
// bounded by the client's timeout.
func (p *peers) send(id, addr string, data []byte, sentAt time.Time) {
	defer p.wg.Done()
	for {
		ack, err := p.post(addr, data)
		p.mu.Lock()
		p.record(id, addr, sentAt, ack, err)
		q, ok := p.queued[id]
		delete(p.queued, id)
		next, known := p.addrs[id]
		if !ok || !known || p.closed {
			delete(p.inflight, id)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		addr, data, sentAt = next, q.data, q.sentAt
	}
}

// record notes the outcome of a report sent to id at addr. Called with
// p.mu held.
func (p *peers) record(id, addr string, sentAt time.Time, ack peerAck, err error) {
	if err != nil {
		p.log.Debug("report to peer failed", "peer", id, "addr", addr, "err", err)
		if errors.Is(err, syscall.ECONNREFUSED) {
			if old, ok := p.refused[id]; !ok || sentAt.After(old.sentAt) {
				p.refused[id] = refusal{sentAt: sentAt, addr: addr}
			}
		}
		return
	}
	delete(p.refused, id)
	if ack.ID != id { // another broker answers at that address now
		return
	}
	if old, ok := p.acks[id]; !ok || sentAt.After(old.sentAt) {
		p.acks[id] = ackState{sentAt: sentAt, ack: ack}
	}
}

func (p *peers) post(addr string, data []byte) (peerAck, error) {
	resp, err := p.client.Post("http://"+addr+reportRoute, "application/json", bytes.NewReader(data))
	if err != nil {
		return peerAck{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return peerAck{}, fmt.Errorf("status %s", resp.Status)
	}
	var ack peerAck
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&ack); err != nil {
		return peerAck{}, err
	}
	return ack, nil
}

// fetchAssignment reads the assignment a peer acts on.
func (p *peers) fetchAssignment(ctx context.Context, id string) (*Assignment, error) {
	p.mu.Lock()
	addr := p.addrs[id]
	p.mu.Unlock()
	if addr == "" {
		return nil, fmt.Errorf("cluster: no address for %s", id)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+assignmentRoute, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("cluster: assignment from %s: status %s", id, resp.Status)
	}
	var a Assignment
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&a); err != nil {
		return nil, fmt.Errorf("cluster: assignment from %s: %w", id, err)
	}
	if err := a.Validate(); err != nil {
		return nil, fmt.Errorf("cluster: assignment from %s: %w", id, err)
	}
	return &a, nil
}
