package coord

import (
	"github.com/kaas-dev/kaas/internal/cgroup"
	"github.com/kaas-dev/kaas/internal/group"
)

// Online migration between classic and consumer groups (KIP-848, Kafka's
// group.consumer.migration.policy; docs/cgroup.md, "Online migration"): a
// ConsumerGroupHeartbeat joining a classic group with members converts it
// (upgrade); the classic members of a consumer group are served by it
// through JoinGroup, SyncGroup, Heartbeat and LeaveGroup; and a consumer
// group whose last consumer-protocol member went converts back (downgrade)
// once the writes in flight have landed.

// upgrade converts the classic group of s, which has members, into a
// consumer group, or says why not (GROUP_ID_NOT_FOUND, as Kafka answers).
// The group is not installed: the joining member's heartbeat is fed to it
// first, and install makes it the group's only if that heartbeat is
// accepted. Called with s.mu held.
func (c *Coordinator) upgrade(s *shell) (*consumerGroup, error) {
	m := s.member
	cfg := c.cfg.Consumer
	var why string
	switch {
	case !cfg.UpgradeEnabled():
		why = "online upgrade is disabled (group.consumer.migration.policy " + cfg.MigrationPolicy + ")"
	case m.protocolType() != cgroup.ConsumerProtocolType:
		why = "the group does not use the consumer embedded protocol (protocol type " + m.protocolType() + ")"
	case cfg.MaxSize > 0 && m.core.Members() > cfg.MaxSize:
		why = "the group size exceeds group.consumer.max.size"
	}
	if why != "" {
		c.log.Info("classic group not upgraded to a consumer group: "+why, "group", s.id)
		return nil, ErrNotConsumerGroup
	}
	snap := m.core.Snapshot()
	cg := cgroup.ClassicGroup{Generation: snap.Generation, Leader: snap.Leader}
	if snap.HasProtocol {
		cg.Protocol = snap.Protocol
	}
	for _, ms := range snap.Members {
		cg.Members = append(cg.Members, cgroup.ClassicMember{ID: ms.MemberID, InstanceID: ms.InstanceID,
			ClientID: ms.ClientID, ClientHost: ms.ClientHost, SessionTimeout: ms.SessionTimeout,
			RebalanceTimeout: ms.RebalanceTimeout, Protocols: toCgroupProtocols(ms.Protocols), Assignment: ms.Assignment})
	}
	core, err := cgroup.FromClassic(s.id, cfg, c.cfg.Now(), c.image(), cg)
	if err != nil {
		c.log.Warn("classic group not upgraded to a consumer group", "group", s.id, "err", err)
		return nil, ErrNotConsumerGroup
	}
	return &consumerGroup{c: c, s: s, core: core, seenEpoch: core.Epoch()}, nil
}

// install makes the upgraded group g the group of s: the classic state
// machine answers what it held parked REBALANCE_IN_PROGRESS (those members
// come back to g) and is dropped. Called with s.mu held.
func (c *Coordinator) install(s *shell, g *consumerGroup) {
	gen, members := s.member.generation(), s.member.core.Members()
	s.endClassic(s.member.core.Migrate())
	s.consumer = g
	c.log.Info("classic group converted to a consumer group", "group", s.id, "generation", gen, "members", members)
}

func toCgroupProtocols(ps []group.Protocol) []cgroup.Protocol {
	out := make([]cgroup.Protocol, len(ps))
	for i, p := range ps {
		out[i] = cgroup.Protocol{Name: p.Name, Metadata: p.Metadata}
	}
	return out
}

// maybeDowngrade converts a consumer group left with classic members only
// into a classic group and starts a rebalance of it, as Kafka does. It is
// called once the group's writes in flight have all landed (a snapshot of
// the consumer group must never land after the classic one). Called with
// s.mu held.
func (g *consumerGroup) maybeDowngrade() {
	s, c := g.s, g.c
	g.downgradeDue = false
	if s.consumer != g || s.gone || g.broken || g.core.Empty() || g.core.ClassicMemberCount() != g.core.Members() {
		return
	}
	if !c.cfg.Consumer.DowngradeEnabled() {
		c.log.Info("consumer group not downgraded to a classic group: online downgrade is disabled (group.consumer.migration.policy "+c.cfg.Consumer.MigrationPolicy+")", "group", s.id)
		return
	}
	if limit := c.cfg.Group.MaxSize; limit > 0 && g.core.Members() > limit {
		c.log.Info("consumer group not downgraded to a classic group: its size exceeds group.max.size", "group", s.id)
		return
	}
	cg, err := g.core.ToClassic(c.image())
	if err != nil {
		c.log.Warn("consumer group not downgraded to a classic group", "group", s.id, "err", err)
		return
	}
	snap := group.Snapshot{ProtocolType: cgroup.ConsumerProtocolType, Protocol: cg.Protocol, HasProtocol: true,
		Generation: cg.Generation, Leader: cg.Leader}
	for _, cm := range cg.Members {
		ps := make([]group.Protocol, len(cm.Protocols))
		for i, p := range cm.Protocols {
			ps[i] = group.Protocol{Name: p.Name, Metadata: p.Metadata}
		}
		snap.Members = append(snap.Members, group.MemberSnapshot{MemberID: cm.ID, InstanceID: cm.InstanceID,
			ClientID: cm.ClientID, ClientHost: cm.ClientHost, SessionTimeout: cm.SessionTimeout,
			RebalanceTimeout: cm.RebalanceTimeout, Protocols: ps, Assignment: cm.Assignment})
	}
	m := c.newMembership(s)
	out, err := m.core.Restore(c.cfg.Now(), snap)
	if err != nil {
		c.log.Warn("consumer group not downgraded to a classic group", "group", s.id, "err", err)
		return
	}
	g.stop()
	s.consumer = nil
	s.member = m
	m.seenGen = m.core.Generation()
	m.apply(out)
	c.log.Info("consumer group converted to a classic group", "group", s.id, "generation", cg.Generation,
		"members", len(cg.Members), "protocol", cg.Protocol)
	// The classic members agree on an assignment of their own, as on
	// Kafka. The classic state, rebalancing, replaces the consumer group's
	// in the file now (a move meanwhile loads a classic group).
	out = m.core.Rebalance(c.cfg.Now(), "Downgrade group "+s.id+" from consumer to classic.")
	out.Persist = true
	m.apply(out)
}

// classicInConsumer serves a classic request of a member of a consumer
// group with members: f feeds it to the state machine under s.mu (held on
// entry, released here) and returns the answer; send delivers it once what
// the request changed is durable, or fail's answer when that write failed.
func (c *Coordinator) classicInConsumer(s *shell, f func(g *consumerGroup) cgroup.Output, send func(), fail func(err error)) error {
	g := s.consumer
	if g.broken {
		err := g.brokenErr
		s.mu.Unlock()
		return err
	}
	w, run := g.apply(f(g))
	s.mu.Unlock()
	if w == nil {
		send()
		return nil
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		if run {
			g.perform(w)
		}
		if <-w.done; w.err != nil {
			fail(w.err)
			return
		}
		send()
	}()
	return nil
}

func optString(s string) *string { return &s }

// consumerJoin is JoinGroup for a consumer group with members.
func (c *Coordinator) consumerJoin(s *shell, in group.JoinInput) (<-chan group.JoinResult, error) {
	ch := make(chan group.JoinResult, 1)
	if code := c.cfg.Group.CheckTimeouts(&in); code != group.ErrNone {
		s.mu.Unlock()
		ch <- group.JoinResult{Ref: in.Ref, Err: code, MemberID: in.MemberID, Generation: -1}
		return ch, nil
	}
	var res cgroup.ClassicJoinResult
	err := c.classicInConsumer(s, func(g *consumerGroup) cgroup.Output {
		var out cgroup.Output
		res, out = g.core.ClassicJoin(c.cfg.Now(), c.image(), cgroup.ClassicJoinInput{Version: in.Version,
			MemberID: in.MemberID, InstanceID: in.InstanceID, ClientID: in.ClientID, ClientHost: in.ClientHost,
			SessionTimeout: in.SessionTimeout, RebalanceTimeout: in.RebalanceTimeout, ProtocolType: in.ProtocolType,
			Protocols: toCgroupProtocols(in.Protocols), Reason: in.Reason})
		return out
	}, func() {
		r := group.JoinResult{Ref: in.Ref, Err: group.Code(res.Err), MemberID: res.MemberID, Generation: res.Generation}
		if res.Err == cgroup.ErrNone {
			r.ProtocolType, r.Protocol = optString(res.ProtocolType), optString(res.ProtocolName)
		}
		ch <- r
	}, func(err error) {
		ch <- group.JoinResult{Ref: in.Ref, Err: writeErrCode(err), MemberID: in.MemberID, Generation: -1}
	})
	if err != nil {
		return nil, err
	}
	return ch, nil
}

// consumerSync is SyncGroup for a consumer group with members.
func (c *Coordinator) consumerSync(s *shell, in group.SyncInput) (<-chan group.SyncResult, error) {
	ch := make(chan group.SyncResult, 1)
	var res cgroup.ClassicSyncResult
	err := c.classicInConsumer(s, func(g *consumerGroup) cgroup.Output {
		var out cgroup.Output
		res, out = g.core.ClassicSync(c.cfg.Now(), c.image(), cgroup.ClassicSyncInput{MemberID: in.MemberID,
			InstanceID: in.InstanceID, Generation: in.Generation, ProtocolType: in.ProtocolType, ProtocolName: in.Protocol})
		return out
	}, func() {
		r := group.SyncResult{Ref: in.Ref, Err: group.Code(res.Err), Assignment: res.Assignment}
		if res.Err == cgroup.ErrNone {
			r.ProtocolType, r.Protocol = optString(res.ProtocolType), optString(res.ProtocolName)
		}
		ch <- r
	}, func(err error) {
		ch <- group.SyncResult{Ref: in.Ref, Err: writeErrCode(err)}
	})
	if err != nil {
		return nil, err
	}
	return ch, nil
}

// consumerHeartbeat is Heartbeat for a consumer group with members.
func (c *Coordinator) consumerHeartbeat(s *shell, in group.HeartbeatInput) (group.HeartbeatResult, error) {
	ch := make(chan group.HeartbeatResult, 1)
	var code cgroup.Code
	err := c.classicInConsumer(s, func(g *consumerGroup) cgroup.Output {
		var out cgroup.Output
		code, out = g.core.ClassicHeartbeat(c.cfg.Now(), in.MemberID, in.InstanceID, in.Generation)
		return out
	}, func() {
		ch <- group.HeartbeatResult{Ref: in.Ref, Err: group.Code(code)}
	}, func(err error) {
		ch <- group.HeartbeatResult{Ref: in.Ref, Err: writeErrCode(err)}
	})
	if err != nil {
		return group.HeartbeatResult{}, err
	}
	return <-ch, nil
}

// consumerLeave is LeaveGroup for a consumer group with members.
func (c *Coordinator) consumerLeave(s *shell, in group.LeaveInput) (group.LeaveResult, error) {
	ch := make(chan group.LeaveResult, 1)
	var codes []cgroup.Code
	leavers := make([]cgroup.ClassicLeaver, len(in.Members))
	for i, l := range in.Members {
		leavers[i] = cgroup.ClassicLeaver{MemberID: l.MemberID, InstanceID: l.InstanceID}
	}
	result := func(override group.Code) group.LeaveResult {
		r := group.LeaveResult{Ref: in.Ref}
		for i, l := range in.Members {
			code := group.Code(codes[i])
			if code == group.ErrNone {
				code = override
			}
			r.Members = append(r.Members, group.LeaveMemberResult{MemberID: l.MemberID, InstanceID: l.InstanceID, Err: code})
		}
		if in.Version <= 2 && len(r.Members) == 1 {
			r.Err = r.Members[0].Err
		}
		return r
	}
	err := c.classicInConsumer(s, func(g *consumerGroup) cgroup.Output {
		var out cgroup.Output
		codes, out = g.core.ClassicLeave(c.cfg.Now(), c.image(), leavers)
		return out
	}, func() {
		ch <- result(group.ErrNone)
	}, func(err error) {
		ch <- result(writeErrCode(err))
	})
	if err != nil {
		return group.LeaveResult{}, err
	}
	return <-ch, nil
}
