package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/kaas-dev/kaas/internal/cliflag"
	"github.com/kaas-dev/kaas/internal/cluster"
	"github.com/kaas-dev/kaas/internal/volume"
)

// runRemoveBroker asks the controller to drop a broker's row from
// assignment.json: the on-purpose removal of a broker from the cluster. The
// controller drops the row once the broker is not alive (dead, or drained
// and stopped); until then the request waits on the volume.
func runRemoveBroker(args []string) error {
	fs := cliflag.New("remove-broker")
	var dataDir, id string
	fs.StringVar(&dataDir, "data-dir", "", "the shared volume (required)")
	fs.StringVar(&id, "id", "", "the broker to remove: kaas-N, or N (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if dataDir == "" || id == "" {
		return errors.New("--data-dir and --id are required")
	}
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
