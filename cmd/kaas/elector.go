package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kaas-dev/kaas/internal/broker"
	"github.com/kaas-dev/kaas/internal/cluster"
	"github.com/kaas-dev/kaas/internal/cluster/k8slease"
	"github.com/kaas-dev/kaas/internal/node"
	"github.com/kaas-dev/kaas/internal/volume"
)

// serviceAccountNamespace is where Kubernetes mounts the pod's namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// electionFlags chooses the controller-election backend.
type electionFlags struct {
	Backend        string `name:"election" enum:"file,kubernetes" default:"file" help:"Controller election: file (a lock on the shared volume) or kubernetes (a coordination.k8s.io Lease)."`
	LeaseName      string `name:"lease-name" default:"kaas-controller" help:"Name of the Lease used by --election kubernetes."`
	LeaseNamespace string `name:"lease-namespace" help:"Namespace of the Lease (default: the pod's own namespace, else default)."`

	// One API client for every broker of the process (kaas dev starts
	// several concurrently); guarded by mu.
	mu     sync.Mutex
	client kubernetes.Interface
}

// elector returns broker bc's Elector; nil selects the runtime's default
// FileElector. With --election kubernetes outside a cluster (or without a
// service-account token) the process cannot elect at all, so it exits here
// with the reason rather than run a broker that can never be controller.
func (f *electionFlags) elector(bc broker.Config, ttl time.Duration) cluster.Elector {
	if f.Backend != "kubernetes" {
		return nil
	}
	e, err := f.leaseElector(bc, ttl)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaas: --election kubernetes:", err)
		os.Exit(1)
	}
	return e
}

func (f *electionFlags) leaseElector(bc broker.Config, ttl time.Duration) (*k8slease.Elector, error) {
	client, err := f.kubeClient()
	if err != nil {
		return nil, err
	}
	if ttl <= 0 {
		ttl = 3 * time.Second // node.Config's DeadAfter default
	}
	log := bc.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	assignment := volume.AssignmentPath(bc.DataDir)
	return k8slease.New(k8slease.Options{
		Leases:    client.CoordinationV1(),
		Namespace: leaseNamespace(f.LeaseNamespace),
		Name:      f.LeaseName,
		Identity:  node.Name(bc.ID),
		TTL:       ttl,
		Logger:    log,
		// A recreated Lease must not restart below the epoch brokers know.
		EpochFloor: func() int64 {
			a, err := cluster.ReadAssignment(assignment)
			if err != nil {
				return 0
			}
			return a.ControllerEpoch
		},
	})
}

func (f *electionFlags) kubeClient() (kubernetes.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.client != nil {
		return f.client, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		if errors.Is(err, rest.ErrNotInCluster) {
			return nil, errors.New("not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST is unset); use --election file")
		}
		return nil, err
	}
	// Followers read the Lease every election tick; client-go's default of
	// 5 requests/s would throttle kaas dev's several brokers.
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "kaas"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	f.client = client
	return client, nil
}

// leaseNamespace is the flag's value, else the pod's namespace, else "default".
func leaseNamespace(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return "default"
}
