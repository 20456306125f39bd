//go:build unix

package bench

import "syscall"

// syncAll asks the kernel to write every dirty page to disk (sync(2)).
func syncAll() { syscall.Sync() }
