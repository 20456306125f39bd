package broker

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kaas-dev/kaas/internal/powerfs"
)

// Defect: CreateTopics on a full volume answered UNKNOWN_SERVER_ERROR;
// Kafka answers KAFKA_STORAGE_ERROR, which tells the operator where to
// look. The volume here is a powerfs mount whose creates and writes fail
// with ENOSPC.
func TestCreateTopicsOnAFullVolumeIsAStorageError(t *testing.T) {
	fsys := powerfs.MountT(t, t.TempDir(), filepath.Join(t.TempDir(), "mnt"), powerfs.Options{Metadata: powerfs.MetadataImmediate})
	b := startBroker(t, fsys.Dir(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(client(t, b))
	for _, op := range []powerfs.Op{powerfs.OpCreate, powerfs.OpWrite} {
		if err := fsys.Inject(powerfs.Fault{Op: op, Errno: syscall.ENOSPC}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := adm.CreateTopic(ctx, 1, 1, nil, "full")
	if err == nil {
		err = r.Err
	}
	if !errors.Is(err, kerr.KafkaStorageError) {
		t.Fatalf("CreateTopics on a full volume: %v, want KAFKA_STORAGE_ERROR", err)
	}
	fsys.ClearFaults()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "full"); err != nil {
		t.Fatalf("once there is room again: %v", err)
	}
}
