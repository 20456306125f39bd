package bench

import "syscall"

const tmpfsMagic = 0x01021994 // TMPFS_MAGIC from linux/magic.h

// IsTmpfs reports whether dir lives on tmpfs (memory, no real fsync).
func IsTmpfs(dir string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Type == tmpfsMagic
}
