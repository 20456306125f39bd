package broker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/kaas-dev/kaas/internal/fsutil"
)

// pidBlockSize is how many producer ids one claimed block holds.
const pidBlockSize = 1000

// pidAllocator hands out producer ids unique across every broker sharing the
// volume. Ids come in blocks: block n covers [n*1000, n*1000+999] and is
// claimed by exclusively creating <dir>/block-<n, 20 digits> (content: the
// claiming broker's id). A claimed block is never reused, even after a
// restart, so ids never repeat.
type pidAllocator struct {
	dir    string
	broker int32

	mu        sync.Mutex // guards nextID, end
	nextID    int64
	end       int64 // exclusive end of the current block
	lastBlock int64 // highest block number seen on disk, -1 before the first scan
}

func newPIDAllocator(dir string, broker int32) *pidAllocator {
	return &pidAllocator{dir: dir, broker: broker, lastBlock: -1}
}

func (a *pidAllocator) next() (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.nextID >= a.end {
		if err := a.claim(); err != nil {
			return -1, err
		}
	}
	id := a.nextID
	a.nextID++
	return id, nil
}

// claim takes the lowest unclaimed block above every block seen on disk.
func (a *pidAllocator) claim() error {
	if err := os.MkdirAll(a.dir, 0o755); err != nil {
		return fmt.Errorf("producer ids: %w", err)
	}
	ents, err := os.ReadDir(a.dir)
	if err != nil {
		return fmt.Errorf("producer ids: %w", err)
	}
	for _, e := range ents {
		if n, ok := strings.CutPrefix(e.Name(), "block-"); ok {
			if v, err := strconv.ParseInt(n, 10, 64); err == nil && v > a.lastBlock {
				a.lastBlock = v
			}
		}
	}
	for tries := 0; tries < 1000; tries++ {
		n := a.lastBlock + 1
		path := filepath.Join(a.dir, fmt.Sprintf("block-%020d", n))
		err := fsutil.CreateExclusive(path, []byte(strconv.Itoa(int(a.broker))))
		a.lastBlock = n
		if err == nil {
			a.nextID, a.end = n*pidBlockSize, (n+1)*pidBlockSize
			return nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("producer ids: claim block %d: %w", n, err)
		}
	}
	return errors.New("producer ids: no free block after 1000 tries")
}
