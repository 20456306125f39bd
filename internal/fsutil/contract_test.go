package fsutil

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestCheckVolumeAcceptsALocalDisk(t *testing.T) {
	dir := t.TempDir()
	if err := CheckVolume(dir); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("the check left %d entries behind", len(ents))
	}
}

func TestCheckVolumeRefusesAVolumeWithoutExclusiveCreate(t *testing.T) {
	ops := osOps
	ops.createExcl = func(path string, data []byte) error { return os.WriteFile(path, data, 0o644) } // no O_EXCL
	err := checkVolume(t.TempDir(), ops)
	if !errors.Is(err, ErrVolumeContract) || !strings.Contains(err.Error(), "O_CREAT|O_EXCL") {
		t.Fatalf("err = %v, want a contract error naming exclusive create", err)
	}
	ops = osOps
	ops.link = func(string, string) error { return errors.New("operation not supported") }
	if err := checkVolume(t.TempDir(), ops); !errors.Is(err, ErrVolumeContract) || !strings.Contains(err.Error(), "hard link") {
		t.Fatalf("err = %v, want a contract error naming hard links", err)
	}
}
