package cluster

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeAssignment: arbitrary bytes never panic the assignment decoder;
// what it accepts is valid and survives a round trip.
func FuzzDecodeAssignment(f *testing.F) {
	f.Add([]byte(`{"controllerEpoch":3,"assignmentVersion":57,"controller":"kaas-0","brokers":[{"id":"kaas-0","health":"alive"}],"partitions":[{"topic":"t","partition":0,"broker":"kaas-0","epoch":1,"role":"leader"}],"consumerGroups":[{"groupId":"g","broker":"kaas-0","epoch":1}]}`))
	f.Add([]byte(`{"brokers":[{"id":"a","health":"zombie"}]}`))
	f.Add([]byte(`{"brokers":[{"id":"a","health":"alive"},{"id":"a","health":"dead"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAssignment(b)
		if err != nil {
			return
		}
		if err := a.Validate(); err != nil {
			t.Fatalf("accepted an invalid assignment: %v", err)
		}
		data, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeAssignment(data); err != nil {
			t.Fatalf("round trip: %v", err)
		}
	})
}
