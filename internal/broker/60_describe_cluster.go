package broker

// DescribeCluster. Endpoint type 1 (brokers) only: kaas has no
// separate controller listeners (UNSUPPORTED_ENDPOINT_TYPE for type 2).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.DescribeCluster, 0, 1, (*Broker).handleDescribeCluster) }

func (b *Broker) handleDescribeCluster(_ context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.DescribeClusterRequest)
	resp := r.ResponseKind().(*kmsg.DescribeClusterResponse)
	resp.EndpointType = 1
	resp.ClusterAuthorizedOperations = -2147483648
	if r.Version >= 1 && r.EndpointType != 1 {
		resp.ErrorCode = kerr.UnsupportedEndpointType.Code
		resp.EndpointType = r.EndpointType
		return now(resp)
	}
	resp.ClusterID = b.clusterID
	resp.ControllerID = b.cfg.Cluster.ControllerID()
	for _, bi := range b.cfg.Cluster.Brokers() {
		db := kmsg.NewDescribeClusterResponseBroker()
		db.NodeID, db.Host, db.Port = bi.NodeID, bi.Host, bi.Port
		if bi.Rack != "" {
			rack := bi.Rack
			db.Rack = &rack
		}
		resp.Brokers = append(resp.Brokers, db)
	}
	return now(resp)
}
