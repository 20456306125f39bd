package group

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestErrorCodesMatchKerr(t *testing.T) {
	for code, e := range map[Code]*kerr.Error{
		ErrCoordinatorNotAvailable:   kerr.CoordinatorNotAvailable,
		ErrNotCoordinator:            kerr.NotCoordinator,
		ErrIllegalGeneration:         kerr.IllegalGeneration,
		ErrInconsistentGroupProtocol: kerr.InconsistentGroupProtocol,
		ErrInvalidGroupID:            kerr.InvalidGroupID,
		ErrUnknownMemberID:           kerr.UnknownMemberID,
		ErrInvalidSessionTimeout:     kerr.InvalidSessionTimeout,
		ErrRebalanceInProgress:       kerr.RebalanceInProgress,
		ErrNonEmptyGroup:             kerr.NonEmptyGroup,
		ErrMemberIDRequired:          kerr.MemberIDRequired,
		ErrGroupMaxSizeReached:       kerr.GroupMaxSizeReached,
		ErrFencedInstanceID:          kerr.FencedInstanceID,
	} {
		if int16(code) != e.Code {
			t.Errorf("%s: have %d, kerr %d", e.Message, code, e.Code)
		}
		if ErrName(code) != e.Message {
			t.Errorf("ErrName(%d) = %s", code, ErrName(code))
		}
	}
	if ErrName(0) != "NONE" {
		t.Error("ErrName(0)")
	}
}

func TestTransitionTable(t *testing.T) {
	legal := map[[2]State]bool{
		{PreparingRebalance, Empty}:               true,
		{Empty, PreparingRebalance}:               true,
		{CompletingRebalance, PreparingRebalance}: true,
		{Stable, PreparingRebalance}:              true,
		{PreparingRebalance, CompletingRebalance}: true,
		{CompletingRebalance, Stable}:             true,
	}
	for from := Empty; from <= Dead; from++ {
		for to := Empty; to <= Dead; to++ {
			want := legal[[2]State{from, to}] || to == Dead
			if CanTransition(from, to) != want {
				t.Errorf("%s -> %s: got %v", from, to, !want)
			}
		}
	}
	g := New("g", DefaultConfig())
	g.begin(t0)
	if err := g.transition(Stable); err == nil || g.State() != Empty {
		t.Fatalf("Empty -> Stable allowed: %v, %s", err, g.State())
	}
	out := g.end()
	if len(out.Events) != 1 || out.Events[0].Kind != EventBug {
		t.Fatalf("no bug event: %+v", out.Events)
	}
}

func TestStrings(t *testing.T) {
	for s, want := range map[State]string{Empty: "Empty", PreparingRebalance: "PreparingRebalance",
		CompletingRebalance: "CompletingRebalance", Stable: "Stable", Dead: "Dead", 9: "State(9)"} {
		if s.String() != want {
			t.Errorf("%d: %s", s, s)
		}
	}
	if TimerSyncTimeout.String() != "SyncTimeout" || (TimerKey{Kind: TimerSession, Member: "m"}).String() != "Session[m]" {
		t.Error("timer strings")
	}
	if EventBug.String() == "" || EventKind(99).String() != "EventKind(99)" {
		t.Error("event strings")
	}
	e := Event{Kind: EventStateChange, Group: "g", Member: "m", From: Empty, To: PreparingRebalance}
	if len(e.Attrs()) != 5 {
		t.Errorf("attrs %v", e.Attrs())
	}
}

func TestDefaultMemberID(t *testing.T) {
	g := New("g", Config{})
	if g.cfg.MinSessionTimeout == 0 || g.cfg.NewMemberID == nil || g.cfg.InitialRebalanceDelay != 0 {
		t.Fatalf("withDefaults: %+v", g.cfg)
	}
	a, b := randomMemberID("client"), randomMemberID("client")
	if a == b || len(a) != len("client-")+36 {
		t.Fatalf("ids %q %q", a, b)
	}
}
