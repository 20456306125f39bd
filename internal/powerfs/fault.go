package powerfs

import (
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"sync"
	"syscall"
)

// Op is a file system call that a Fault can make fail.
type Op uint8

const (
	OpWrite  Op = iota + 1 // write(2) on a regular file
	OpFsync                // fsync/fdatasync of a regular file or of a directory
	OpRename               // rename(2); the fault matches the source or the target path
	OpCreate               // creating a file (open with O_CREAT of a new name), a directory or a hard link
)

func (o Op) String() string {
	switch o {
	case OpWrite:
		return "write"
	case OpFsync:
		return "fsync"
	case OpRename:
		return "rename"
	case OpCreate:
		return "create"
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// Fault makes calls fail. A call fails when its Op matches and its path
// (slash-separated, relative to the mount root, without a leading slash; ""
// for the root itself) matches Path.
type Fault struct {
	Op Op
	// Path is a regular expression (Go syntax, unanchored) matched against
	// the path; "" matches every path.
	Path string
	// Errno is the error the call returns; 0 means EIO.
	Errno syscall.Errno
	// Count is how many matching calls fail before the fault is spent; 0
	// or less means every matching call until Clear.
	Count int
}

// faultSet holds the armed faults and counts what they did.
type faultSet struct {
	mu     sync.Mutex // guards armed, failed
	armed  []*armed
	failed map[Op]int
}

type armed struct {
	Fault
	re   *regexp.Regexp
	left int // calls still to fail; <0: unlimited
}

func (s *faultSet) add(f Fault) error {
	if f.Op < OpWrite || f.Op > OpCreate {
		return fmt.Errorf("powerfs: fault on unknown %v", f.Op)
	}
	re, err := regexp.Compile(f.Path)
	if err != nil {
		return fmt.Errorf("powerfs: fault path %q: %w", f.Path, err)
	}
	if f.Errno == 0 {
		f.Errno = syscall.EIO
	}
	left := f.Count
	if left <= 0 {
		left = -1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = append(s.armed, &armed{Fault: f, re: re, left: left})
	return nil
}

func (s *faultSet) clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = nil
}

// check returns the errno a call of op on paths must fail with, or 0. The
// first armed fault that matches is used (and spent by one).
func (s *faultSet) check(op Op, paths ...string) syscall.Errno {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, a := range s.armed {
		if a.Op != op {
			continue
		}
		for _, p := range paths {
			if !a.re.MatchString(p) {
				continue
			}
			if a.left > 0 {
				a.left--
				if a.left == 0 {
					s.armed = append(s.armed[:i:i], s.armed[i+1:]...)
				}
			}
			if s.failed == nil {
				s.failed = map[Op]int{}
			}
			s.failed[op]++
			return a.Errno
		}
	}
	return 0
}

func (s *faultSet) counts() map[Op]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.failed)
}
