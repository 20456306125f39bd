package wire

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Range is an inclusive range of versions of one API.
type Range struct{ Min, Max int16 }

// versions is the one table of what kaas advertises. An entry is a promise:
// every field of every listed version is honoured by the broker's handler.
// The broker's tests check that each key here has a handler.
var versions = map[int16]Range{
	kmsg.Produce.Int16():              {3, 11},
	kmsg.Fetch.Int16():                {4, 16},
	kmsg.ListOffsets.Int16():          {1, 8},
	kmsg.Metadata.Int16():             {0, 12},
	kmsg.ApiVersions.Int16():          {0, 4},
	kmsg.CreateTopics.Int16():         {0, 7},
	kmsg.DeleteTopics.Int16():         {0, 6},
	kmsg.InitProducerID.Int16():       {0, 5},
	kmsg.FindCoordinator.Int16():      {0, 5},
	kmsg.OffsetCommit.Int16():         {0, 9},
	kmsg.OffsetFetch.Int16():          {0, 9},
	kmsg.JoinGroup.Int16():            {0, 9},
	kmsg.SyncGroup.Int16():            {0, 5},
	kmsg.Heartbeat.Int16():            {0, 4},
	kmsg.LeaveGroup.Int16():           {0, 5},
	kmsg.DescribeGroups.Int16():       {0, 6},
	kmsg.ListGroups.Int16():           {0, 5},
	kmsg.DeleteGroups.Int16():         {0, 2},
	kmsg.OffsetDelete.Int16():         {0, 0},
	kmsg.AddPartitionsToTxn.Int16():   {0, 5},
	kmsg.AddOffsetsToTxn.Int16():      {0, 4},
	kmsg.EndTxn.Int16():               {0, 5},
	kmsg.WriteTxnMarkers.Int16():      {0, 1},
	kmsg.TxnOffsetCommit.Int16():      {0, 5},
	kmsg.DescribeTransactions.Int16(): {0, 0},
	kmsg.ListTransactions.Int16():     {0, 1},
	kmsg.DescribeConfigs.Int16():      {0, 4},
	kmsg.CreatePartitions.Int16():     {0, 3},
	kmsg.DescribeCluster.Int16():      {0, 1},
}

// Supported reports the advertised range for key.
func Supported(key int16) (Range, bool) {
	r, ok := versions[key]
	return r, ok
}

// Keys lists the advertised API keys in ascending order.
func Keys() []int16 {
	keys := make([]int16, 0, len(versions))
	for k := range versions {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}

// APIVersionsKeys returns the table as ApiVersions response entries.
func APIVersionsKeys() []kmsg.ApiVersionsResponseApiKey {
	out := make([]kmsg.ApiVersionsResponseApiKey, 0, len(versions))
	for _, k := range Keys() {
		r := versions[k]
		out = append(out, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: r.Min, MaxVersion: r.Max})
	}
	return out
}
