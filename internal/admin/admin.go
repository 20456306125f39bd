// Package admin is a broker's HTTP admin listener (--admin-listen):
// /metrics in the Prometheus text format, /healthz (the process is alive),
// /readyz (the broker serves clients) and, when asked for, /debug/pprof/.
// See docs/operations.md.
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options configure the listener.
type Options struct {
	Registry *prometheus.Registry // what /metrics serves
	// Ready reports whether the broker serves clients, and why not.
	Ready func() (bool, string)
	Pprof bool // serve /debug/pprof/
	Log   *slog.Logger
}

// Server is a running admin listener.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// Listen binds addr and serves until Close.
func Listen(addr string, o Options) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin: listen %s: %w", addr, err)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(o.Log.Handler(), slog.LevelWarn), ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := o.Ready()
		if !ok {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if o.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	s := &Server{ln: ln, done: make(chan struct{}), srv: &http.Server{Handler: mux,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(o.Log.Handler(), slog.LevelDebug)}}
	limited := &limitListener{Listener: ln, max: MaxConnections, log: o.Log}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(limited); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.Log.Warn("admin listener stopped", "err", err)
		}
	}()
	o.Log.Info("admin listener", "addr", ln.Addr().String(), "pprof", o.Pprof)
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops serving, letting requests in flight finish until ctx ends.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	<-s.done
	return err
}
