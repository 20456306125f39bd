//go:build !linux

package bench

// IsTmpfs reports whether dir lives on tmpfs; outside Linux it never does.
func IsTmpfs(string) bool { return false }

// FSType is the type of the file system dir lives on; outside Linux it
// cannot be told ("").
func FSType(string) string { return "" }
