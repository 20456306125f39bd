//go:build !linux

package bench

// IsTmpfs reports whether dir lives on tmpfs; outside Linux it never does.
func IsTmpfs(string) bool { return false }
