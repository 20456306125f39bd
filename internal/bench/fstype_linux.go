package bench

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

const tmpfsMagic = 0x01021994 // TMPFS_MAGIC from linux/magic.h

// IsTmpfs reports whether dir lives on tmpfs (memory, no real fsync).
func IsTmpfs(dir string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Type == tmpfsMagic
}

// FSType is the type of the file system dir lives on, as the mount table
// names it ("ext4", "tmpfs", "fuse.ceph-fuse", "nfs4", ...): the entry of
// /proc/self/mounts with the longest mount point that contains dir. "" when
// it cannot be told.
func FSType(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return ""
	}
	defer f.Close()
	best, typ := -1, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue
		}
		mnt := unescapeMount(fields[1])
		if abs != mnt && !strings.HasPrefix(abs, strings.TrimSuffix(mnt, "/")+"/") {
			continue
		}
		if len(mnt) >= best { // later entries mount over earlier ones
			best, typ = len(mnt), fields[2]
		}
	}
	return typ
}

// unescapeMount undoes the octal escapes of /proc/self/mounts (\040 for a
// space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			v := 0
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + int(c-'0')
			}
			if ok {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
