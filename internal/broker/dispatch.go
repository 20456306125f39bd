package broker

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

// handler runs the synchronous part of a request on the connection's reader
// goroutine (so effects happen in request order) and returns the function
// that produces the response; that function may block (fsync, long poll) and
// runs on the connection's writer goroutine.
type handler func(b *Broker, ctx context.Context, c *conn, req wire.Request) func() kmsg.Response

// api is one served API: the versions advertised and its handler.
type api struct {
	versions wire.Range
	handle   handler
}

// apis holds every served API. Each handler file registers its own key and
// versions once, in an init function: that registration is the one place a
// version range is stated; ApiVersions and decoding derive from it.
var apis = map[int16]api{}

// register serves key at versions min..max with h. Called from init only.
func register(key kmsg.Key, min, max int16, h handler) {
	if _, dup := apis[key.Int16()]; dup {
		panic("broker: " + key.Name() + " registered twice") // a programming error at init
	}
	apis[key.Int16()] = api{versions: wire.Range{Min: min, Max: max}, handle: h}
}

// supported is the wire.Supported of this broker.
func supported(key int16) (wire.Range, bool) {
	a, ok := apis[key]
	return a.versions, ok
}

// SupportedVersions lists every served API key with its versions, in key
// order: what ApiVersions advertises.
func SupportedVersions() []kmsg.ApiVersionsResponseApiKey {
	out := make([]kmsg.ApiVersionsResponseApiKey, 0, len(apis))
	for k, a := range apis {
		out = append(out, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: a.versions.Min, MaxVersion: a.versions.Max})
	}
	slices.SortFunc(out, func(x, y kmsg.ApiVersionsResponseApiKey) int { return int(x.ApiKey) - int(y.ApiKey) })
	return out
}

func (b *Broker) dispatch(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	return apis[req.Key].handle(b, ctx, c, req) // Decode admits registered keys only
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
