package vfs_test

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/durofs/durofs/internal/vfs"
)

// TestOverwrite: Overwrite writes in place, padded to the file's size, only
// over an existing regular file large enough; a failed or short write, or a
// failed then, leaves the old content and fails.
func TestOverwrite(t *testing.T) {
	const path = "/d/f.json"
	old := string(vfs.PadBlock([]byte(`{"v":1}`)))
	errThen := errors.New("then failed")
	// A file longer than a page is replaced, not written in place: a kill -9
	// could tear a write of more than a page.
	pageBig := string(vfs.PadBlock([]byte(`{"pad":"` + strings.Repeat("x", os.Getpagesize()) + `"}`)))
	for _, tc := range []struct {
		name     string
		existing string // "" = no file
		data     string
		fault    func(m *vfs.MemFS)
		then     error
		wantDone bool
		wantErr  error
		want     string // the file afterwards
	}{
		{name: "no file", data: `{"v":2}`, wantDone: false, want: ""},
		{name: "too small", existing: `{}`, data: `{"v":2}`, wantDone: false, want: `{}`},
		{name: "larger than a page", existing: pageBig, data: `{"v":2}`, wantDone: false, want: pageBig},
		{name: "fits", existing: old, data: `{"v":2}`, wantDone: true, want: `{"v":2}` + strings.Repeat(" ", len(old)-7)},
		{name: "then fails", existing: old, data: `{"v":2}`, then: errThen, wantDone: true, wantErr: errThen, want: old},
		{name: "write fails", existing: old, data: `{"v":2}`, fault: func(m *vfs.MemFS) { m.InjectError("write", 1, syscall.EIO) }, wantDone: true, wantErr: syscall.EIO, want: old},
		{name: "short write", existing: old, data: `{"v":2}`, fault: func(m *vfs.MemFS) { m.InjectShortWrite(1, 3, syscall.ENOSPC) }, wantDone: true, wantErr: syscall.ENOSPC, want: old},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := vfs.NewStrictMem()
			must(t, m.MkdirAll("/d", vfs.DirPerm))
			if tc.existing != "" {
				must(t, vfs.WriteFile(m, path, []byte(tc.existing)))
			}
			if tc.fault != nil {
				tc.fault(m)
			}
			ran := false
			done, err := vfs.Overwrite(m, path, []byte(tc.data), func() error { ran = true; return tc.then })
			m.ClearFaults()
			if done != tc.wantDone || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("Overwrite = %v, %v; want %v, %v", done, err, tc.wantDone, tc.wantErr)
			}
			if ran != (tc.wantDone && tc.fault == nil) {
				t.Errorf("then ran = %v", ran)
			}
			got, rerr := m.ReadFile(path)
			if tc.want == "" {
				if rerr == nil {
					t.Errorf("a file was created: %q", got)
				}
				return
			}
			if string(got) != tc.want {
				t.Errorf("file = %q, want %q", got, tc.want)
			}
		})
	}
}
