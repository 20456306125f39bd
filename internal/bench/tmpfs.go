package bench

import "os"

// TmpfsDir returns a writable tmpfs directory for the in-memory kaas target.
func TmpfsDir() (string, bool) {
	const shm = "/dev/shm"
	if fi, err := os.Stat(shm); err != nil || !fi.IsDir() || !IsTmpfs(shm) {
		return "", false
	}
	f, err := os.CreateTemp(shm, ".kaas-bench-probe-")
	if err != nil {
		return "", false
	}
	f.Close()
	os.Remove(f.Name())
	return shm, true
}
