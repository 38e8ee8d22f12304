package provider

import (
	"errors"
	"strings"
	"testing"
)

// Raft's majority rule as drivers use it to answer MayRemoveMaster.
func TestRaftQuorum(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name              string
		voters, reachable int
		leavingReachable  bool
		wantRefusal       string // empty: may leave
	}{
		{"3 of 3 reachable, a reachable one leaves", 3, 3, true, ""},
		{"2 of 3 reachable, a reachable one would leave 1 of 2", 3, 2, true, "it would leave 1 reachable of 2 masters, below quorum 2"},
		{"2 of 3 reachable, the dead one leaves", 3, 2, false, ""},
		{"1 of 3 reachable: no quorum to change anything", 3, 1, false, "the platform has no quorum now: 1 of 3 masters reachable, 2 needed"},
		{"2 of 2, one leaves", 2, 2, true, ""},
		{"1 of 2 reachable, the dead one leaves", 2, 1, false, "the platform has no quorum now: 1 of 2 masters reachable, 2 needed"},
		{"the last master", 1, 1, true, "it is the last master"},
		{"5 of 5, one leaves", 5, 5, true, ""},
		{"3 of 5 reachable, a reachable one would leave 2 of 4", 5, 3, true, "it would leave 2 reachable of 4 masters, below quorum 3"},
		{"3 of 5 reachable, a dead one leaves", 5, 3, false, ""},
	}
	for _, tt := range tests {
		err := RaftQuorum("m", tt.voters, tt.reachable, tt.leavingReachable)
		switch {
		case tt.wantRefusal == "" && err != nil:
			t.Errorf("%s: refused: %v", tt.name, err)
		case tt.wantRefusal != "" && (!errors.Is(err, ErrQuorum) || !strings.Contains(err.Error(), tt.wantRefusal)):
			t.Errorf("%s: err = %v, want ErrQuorum saying %q", tt.name, err, tt.wantRefusal)
		}
	}
}
