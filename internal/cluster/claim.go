package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"syscall"
	"time"
)

// statusRoute answers a broker's own view (peerAck) without a report: the
// start-up check asks it of whoever reports under the id it is about to
// take.
const statusRoute = "/kaas/v1/status"

// ErrAlreadyRunning: another live process reports under the broker id.
var ErrAlreadyRunning = errors.New("already running")

// CheckNotRunning refuses to start broker id while another process runs as
// it (docs/cluster.md, "Start-up"). It is called before the broker opens
// anything on the volume. The last report under id decides:
//
//   - none, or one that says stopped: the id is free;
//   - its cluster listener answers as id: that process is alive, refuse;
//   - its cluster listener refuses the connection, or answers as another
//     broker: the process is gone (killed, or restarted elsewhere), free;
//   - no answer (a frozen process, or a network in the way): watch the
//     report for deadAfter plus one report interval, the time the
//     controller would take to declare it dead; it changing means the
//     process is alive, refuse; it standing still means it is dead, free.
//
// The check only reads: the live broker sees nothing of it.
func CheckNotRunning(ctx context.Context, v Volume, dataDir, id string, reportInterval, deadAfter time.Duration) error {
	if v == nil {
		v = OS{}
	}
	if reportInterval <= 0 {
		reportInterval = time.Second
	}
	if deadAfter <= 0 {
		deadAfter = 3 * time.Second
	}
	path := filepath.Join(reportsDir(dataDir), id+".json")
	read := func() (Report, bool, error) {
		data, err := v.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return Report{}, false, nil
		}
		if err != nil {
			return Report{}, false, fmt.Errorf("cluster: read %s: %w", path, err)
		}
		var r Report
		if json.Unmarshal(data, &r) != nil || r.ID != id {
			return Report{}, false, nil // not a report of id: nothing claims it
		}
		return r, true, nil
	}
	first, ok, err := read()
	if err != nil || !ok || first.State == StateStopped {
		return err
	}
	running := func(how string) error {
		return fmt.Errorf("cluster: broker %s is %w: %s (last report %s at %s, incarnation %s); stop that process first, or start this one with another id",
			id, ErrAlreadyRunning, how, first.State, first.At.UTC().Format(time.RFC3339), first.Incarnation)
	}
	if first.ClusterAddr != "" {
		switch ack, err := askStatus(ctx, first.ClusterAddr, min(reportInterval, time.Second)); {
		case err == nil && ack.ID == id:
			return running("its cluster listener " + first.ClusterAddr + " answers as " + id)
		case err == nil && ack.ID != "":
			return nil // another broker listens there now
		case errors.Is(err, syscall.ECONNREFUSED):
			return nil // nothing listens there: the process is gone
		}
	}
	deadline := time.Now().Add(deadAfter + reportInterval)
	tick := time.NewTicker(max(reportInterval/4, 10*time.Millisecond))
	defer tick.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		r, ok, err := read()
		if err != nil {
			return err
		}
		if !ok || r.State == StateStopped {
			return nil
		}
		if r.Seq != first.Seq || r.Incarnation != first.Incarnation {
			return running("its liveness report changes (seq " + fmt.Sprint(first.Seq) + " -> " + fmt.Sprint(r.Seq) + ")")
		}
	}
	return nil
}

// askStatus asks the broker at a cluster listener who it is.
func askStatus(ctx context.Context, addr string, timeout time.Duration) (peerAck, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+statusRoute, nil)
	if err != nil {
		return peerAck{}, err
	}
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := cl.Do(req)
	if err != nil {
		return peerAck{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return peerAck{}, fmt.Errorf("status %s", resp.Status)
	}
	var ack peerAck
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&ack); err != nil {
		return peerAck{}, err
	}
	return ack, nil
}
