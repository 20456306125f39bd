// Package volume owns the layout of the shared volume: every path kaas keeps
// under a data dir, and the name of a broker. No other package builds a
// volume path (TestOnlyVolumeBuildsVolumePaths checks it); each asks this
// one. It imports the standard library only.
//
//	<data>/<topic>/<partition>/          a partition's log (docs/storage.md)
//	<data>/__cluster/assignment.json     the controller's assignment (docs/cluster.md)
//	<data>/__cluster/cluster.json        the cluster id
//	<data>/__cluster/brokers/<id>.json   liveness reports
//	<data>/__cluster/removals/           remove-broker requests
//	<data>/__cluster/controller/         the file elector's epoch files
//	<data>/__cluster/topics/             the topic registry
//	<data>/__cluster/deleted/            deleted topics' logs, moved aside
//	<data>/__cluster/__consumer_offsets/ one file per group (docs/offsets.md)
//	<data>/__cluster/transactions/       one file per transactional id (docs/transactions.md)
//	<data>/__cluster/producer-ids/       producer-id blocks
//	<data>/__cluster/group-configs.json  per-group configs (docs/cgroup.md)
package volume

import (
	"path/filepath"
	"strconv"
	"strings"
)

// ClusterDirName is the folder of cluster state; no topic may take the name.
const ClusterDirName = "__cluster"

// ClusterDir is <data>/__cluster.
func ClusterDir(data string) string { return filepath.Join(data, ClusterDirName) }

// AssignmentPath is the controller's assignment.json.
func AssignmentPath(data string) string { return filepath.Join(ClusterDir(data), "assignment.json") }

// ClusterIDPath is the file holding the cluster id.
func ClusterIDPath(data string) string { return filepath.Join(ClusterDir(data), "cluster.json") }

// ReportsDir holds every broker's liveness report.
func ReportsDir(data string) string { return filepath.Join(ClusterDir(data), "brokers") }

// RemovalsDir holds remove-broker requests.
func RemovalsDir(data string) string { return filepath.Join(ClusterDir(data), "removals") }

// ControllerDir holds the file elector's epoch files.
func ControllerDir(data string) string { return filepath.Join(ClusterDir(data), "controller") }

// TopicsDir holds the topic registry.
func TopicsDir(data string) string { return filepath.Join(ClusterDir(data), "topics") }

// DeletedDir holds deleted topics' logs until they are removed.
func DeletedDir(data string) string { return filepath.Join(ClusterDir(data), "deleted") }

// OffsetsDir holds one committed-offsets file per group.
func OffsetsDir(data string) string { return filepath.Join(ClusterDir(data), "__consumer_offsets") }

// TransactionsDir holds one file per transactional id.
func TransactionsDir(data string) string { return filepath.Join(ClusterDir(data), "transactions") }

// GroupConfigsPath is <data>/__cluster/group-configs.json.
func GroupConfigsPath(data string) string {
	return filepath.Join(ClusterDir(data), "group-configs.json")
}

// ProducerIDsDir holds the producer-id blocks.
func ProducerIDsDir(data string) string { return filepath.Join(ClusterDir(data), "producer-ids") }

// TopicDir is the folder of a topic's partitions.
func TopicDir(data, topic string) string { return filepath.Join(data, topic) }

// PartitionDir is the folder of one partition's log.
func PartitionDir(data, topic string, partition int32) string {
	return filepath.Join(data, topic, strconv.Itoa(int(partition)))
}

// BrokerName is the id of broker n in assignment.json and reports: kaas-<n>.
func BrokerName(n int32) string { return "kaas-" + strconv.Itoa(int(n)) }

// ParseBrokerName is BrokerName's inverse: "kaas-3" → 3.
func ParseBrokerName(name string) (int32, bool) {
	s, ok := strings.CutPrefix(name, "kaas-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != s {
		return 0, false
	}
	return int32(n), true
}
