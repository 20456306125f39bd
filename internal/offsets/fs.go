package offsets

import (
	"io"
	"io/fs"
	"os"
)

// fileSystem is every I/O edge of the store. osFS is the real one; the tests wrap
// it in a twin that injects failures.
type fileSystem interface {
	MkdirAll(dir string) error
	OpenDir(dir string) (syncer, error)
	CreateExcl(path string) (writeFile, error)
	Rename(from, to string) error
	Remove(path string) error
	Stat(path string) (fs.FileInfo, error)
	// ReadFile returns the content and the identity of one opened file.
	ReadFile(path string) ([]byte, fs.FileInfo, error)
	ReadDir(dir string) ([]fs.DirEntry, error)
}

type syncer interface {
	Sync() error
	Close() error
}

type writeFile interface {
	Write(p []byte) (int, error)
	Sync() error
	Stat() (fs.FileInfo, error)
	Close() error
}

type osFS struct{}

func (osFS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }

func (osFS) OpenDir(dir string) (syncer, error) { return os.Open(dir) }

func (osFS) CreateExcl(path string) (writeFile, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
}

func (osFS) Rename(from, to string) error { return os.Rename(from, to) }

func (osFS) Remove(path string) error { return os.Remove(path) }

func (osFS) Stat(path string) (fs.FileInfo, error) { return os.Stat(path) }

func (osFS) ReadFile(path string) ([]byte, fs.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	data := make([]byte, 0, fi.Size()+512)
	for {
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err != nil {
			if err == io.EOF {
				break
			}
			return nil, nil, err
		}
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
	}
	return data, fi, nil
}

func (osFS) ReadDir(dir string) ([]fs.DirEntry, error) { return os.ReadDir(dir) }
