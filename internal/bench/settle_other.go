//go:build !unix

package bench

// syncAll has no portable equivalent here: Settle only waits.
func syncAll() {}
