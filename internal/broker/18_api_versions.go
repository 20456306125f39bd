package broker

// ApiVersions. The response always uses the v0 header; an
// unsupported version is answered in server.go with a v0 response.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

func apiVersionsResponse(version int16) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(version)
	resp.ApiKeys = SupportedVersions()
	return resp
}

func init() { register(kmsg.ApiVersions, 0, 4, (*Broker).handleAPIVersions) }

func (b *Broker) handleAPIVersions(_ context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.ApiVersionsRequest)
	resp := apiVersionsResponse(r.Version)
	if r.Version >= 3 {
		// KIP-511: name and version must be non-empty, alphanumerics with
		// '.' and '-' inside.
		if !validSoftware(r.ClientSoftwareName) || !validSoftware(r.ClientSoftwareVersion) {
			c.log.Info("ApiVersions: invalid client software name or version",
				"name", r.ClientSoftwareName, "version", r.ClientSoftwareVersion)
			resp.ErrorCode = kerr.InvalidRequest.Code
		}
	}
	return now(resp)
}

func validSoftware(s string) bool {
	if s == "" {
		return false
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	if !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '.' && c != '-' {
			return false
		}
	}
	return true
}
