package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/kaas-dev/kaas/internal/cluster"
	"github.com/kaas-dev/kaas/internal/volume"
)

// removeBrokerCmd asks the controller to drop a broker's row from
// assignment.json: the on-purpose removal of a broker from the cluster. The
// controller drops the row once the broker is not alive (dead, or drained
// and stopped); until then the request waits on the volume.
type removeBrokerCmd struct {
	DataDir string `name:"data-dir" required:"" help:"The shared volume."`
	ID      string `name:"id" required:"" help:"The broker to remove: kaas-N, or N."`
}

func (r *removeBrokerCmd) Run() error {
	dataDir, id := r.DataDir, r.ID
	if n, err := strconv.ParseInt(id, 10, 32); err == nil && n >= 0 {
		id = volume.BrokerName(int32(n))
	}
	if _, ok := volume.ParseBrokerName(id); !ok {
		return fmt.Errorf("--id %q: want kaas-N or N", id)
	}
	a, err := cluster.ReadAssignment(volume.AssignmentPath(dataDir))
	if err != nil && !errors.Is(err, cluster.ErrNoAssignment) {
		return err
	}
	if a != nil {
		if _, ok := a.Row(id); !ok {
			return fmt.Errorf("%s is not in the cluster (assignment version %d)", id, a.AssignmentVersion)
		}
	}
	if err := cluster.RequestRemoval(dataDir, id); err != nil {
		return fmt.Errorf("remove-broker %s: %w", id, err)
	}
	if a != nil && a.IsAlive(id) {
		fmt.Printf("removal of %s requested; it is still alive, so the controller drops its row once it stops\n", id)
	} else {
		fmt.Printf("removal of %s requested; the controller drops its row on its next pass\n", id)
	}
	return nil
}
