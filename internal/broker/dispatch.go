package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

// handler runs the synchronous part of a request on the connection's reader
// goroutine (so effects happen in request order) and returns the function
// that produces the response; that function may block (fsync, long poll) and
// runs on the connection's writer goroutine.
type handler func(b *Broker, ctx context.Context, c *conn, req wire.Request) func() kmsg.Response

// handlers maps every advertised API key to its handler. A test checks that
// wire's version table and this map agree.
var handlers map[int16]handler

func init() {
	handlers = map[int16]handler{
		kmsg.Produce.Int16():              (*Broker).handleProduce,
		kmsg.Fetch.Int16():                (*Broker).handleFetch,
		kmsg.ListOffsets.Int16():          (*Broker).handleListOffsets,
		kmsg.Metadata.Int16():             (*Broker).handleMetadata,
		kmsg.ApiVersions.Int16():          (*Broker).handleAPIVersions,
		kmsg.CreateTopics.Int16():         (*Broker).handleCreateTopics,
		kmsg.DeleteTopics.Int16():         (*Broker).handleDeleteTopics,
		kmsg.InitProducerID.Int16():       (*Broker).handleInitProducerID,
		kmsg.FindCoordinator.Int16():      (*Broker).handleFindCoordinator,
		kmsg.OffsetCommit.Int16():         (*Broker).handleOffsetCommit,
		kmsg.OffsetFetch.Int16():          (*Broker).handleOffsetFetch,
		kmsg.JoinGroup.Int16():            (*Broker).handleJoinGroup,
		kmsg.SyncGroup.Int16():            (*Broker).handleSyncGroup,
		kmsg.Heartbeat.Int16():            (*Broker).handleHeartbeat,
		kmsg.LeaveGroup.Int16():           (*Broker).handleLeaveGroup,
		kmsg.DescribeGroups.Int16():       (*Broker).handleDescribeGroups,
		kmsg.ListGroups.Int16():           (*Broker).handleListGroups,
		kmsg.DeleteGroups.Int16():         (*Broker).handleDeleteGroups,
		kmsg.OffsetDelete.Int16():         (*Broker).handleOffsetDelete,
		kmsg.AddPartitionsToTxn.Int16():   (*Broker).handleAddPartitionsToTxn,
		kmsg.AddOffsetsToTxn.Int16():      (*Broker).handleAddOffsetsToTxn,
		kmsg.EndTxn.Int16():               (*Broker).handleEndTxn,
		kmsg.WriteTxnMarkers.Int16():      (*Broker).handleWriteTxnMarkers,
		kmsg.TxnOffsetCommit.Int16():      (*Broker).handleTxnOffsetCommit,
		kmsg.DescribeTransactions.Int16(): (*Broker).handleDescribeTransactions,
		kmsg.ListTransactions.Int16():     (*Broker).handleListTransactions,
		kmsg.DescribeConfigs.Int16():      (*Broker).handleDescribeConfigs,
		kmsg.CreatePartitions.Int16():     (*Broker).handleCreatePartitions,
		kmsg.DescribeCluster.Int16():      (*Broker).handleDescribeCluster,
	}
}

func (b *Broker) dispatch(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	h, ok := handlers[req.Key]
	if !ok { // the version table promised an API with no handler: a bug
		c.log.Error("no handler for advertised api", "api", wire.Name(req.Key))
		resp := req.Body.ResponseKind()
		return func() kmsg.Response { return resp }
	}
	return h(b, ctx, c, req)
}

// readiness is implemented by cluster views that may not yet be able to
// serve clients (no assignment applied).
type readiness interface{ Ready() bool }

// ready reports whether client traffic may be served. ApiVersions is always
// answered so that clients can probe.
func (b *Broker) ready(h wire.Header) bool {
	if r, ok := b.cfg.Cluster.(readiness); ok && h.Key != kmsg.ApiVersions.Int16() {
		return r.Ready()
	}
	return true
}

// now returns the response unchanged, for handlers that finish at once.
func now(resp kmsg.Response) func() kmsg.Response { return func() kmsg.Response { return resp } }
