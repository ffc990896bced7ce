package vfs_test

import (
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/durofs/durofs/internal/vfs"
)

// TestWriteFileOwned: the file is replaced through the one temporary name
// beside it; a temporary file that a killed writer left (longer than the
// new content, so that a reuse without O_TRUNC shows) is truncated, reused
// and renamed away; a failed write leaves the old file and no temporary.
// Mutations that fail it: O_EXCL instead of O_TRUNC ("left by a killed
// writer" fails with EEXIST), neither (the leftover's tail stays).
func TestWriteFileOwned(t *testing.T) {
	const path = "/d/instance.json"
	for _, tc := range []struct {
		name    string
		left    string // a temporary file left before the write ("" = none)
		fault   func(m *vfs.MemFS)
		wantErr error
		want    string
	}{
		{name: "plain", want: `{"v":2}`},
		{name: "left by a killed writer", left: `{"v":1,"long":"` + strings.Repeat("x", 100) + `"}`, want: `{"v":2}`},
		{name: "write fails", fault: func(m *vfs.MemFS) { m.InjectError("write", 1, syscall.EIO) }, wantErr: syscall.EIO, want: `{"v":0}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := vfs.NewStrictMem()
			must(t, m.MkdirAll("/d", vfs.DirPerm))
			must(t, vfs.WriteFile(m, path, []byte(`{"v":0}`)))
			if tc.left != "" {
				must(t, vfs.WriteNew(m, vfs.OwnedTemp(path), []byte(tc.left)))
			}
			if tc.fault != nil {
				tc.fault(m)
			}
			err := vfs.WriteFileOwned(m, path, []byte(`{"v":2}`))
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("WriteFileOwned = %v, want %v", err, tc.wantErr)
			}
			got, err := m.ReadFile(path)
			must(t, err)
			if string(got) != tc.want {
				t.Errorf("%s = %q, want %q", path, got, tc.want)
			}
			names, err := m.ReadDirNames("/d")
			must(t, err)
			if slices.ContainsFunc(names, vfs.IsTemp) {
				t.Errorf("directory holds %v: a temporary file stays", names)
			}
		})
	}
}
