package broker

import "syscall"

// defaultMaxConnections is three quarters of the process's open-file limit
// (the rest stays for log segments, group and cluster files), at least 64.
func defaultMaxConnections() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 || rl.Cur > 1<<30 {
		return 1 << 16
	}
	return max(int(rl.Cur)*3/4, 64)
}
