//go:build !linux

package broker

// defaultMaxConnections: without a known open-file limit, 65,536.
func defaultMaxConnections() int { return 1 << 16 }
