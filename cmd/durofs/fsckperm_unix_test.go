//go:build unix

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fsckUnreadable runs durofs fsck on d with its FORMAT unreadable to the
// user running it, and returns the output and exit code. As root (who
// reads everything; CI runs as root) fsck runs as nobody; otherwise FORMAT
// is made unreadable.
func fsckUnreadable(t *testing.T, bin, d string) (stdout string, code int) {
	t.Helper()
	format := filepath.Join(d, "FORMAT")
	cmd := exec.Command(bin, "fsck", "--dir", d)
	if os.Geteuid() == 0 {
		openPath(t, bin)
		openPath(t, d)
		must(t, os.Chmod(format, 0o600)) // root's
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	} else {
		must(t, os.Chmod(format, 0))
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	code = exitCode(t, cmd.Run(), cmd.Args[1:])
	if stderr.Len() > 0 {
		t.Logf("durofs fsck stderr:\n%s", stderr.String())
	}
	return out.String(), code
}

// openPath lets every user reach path, a file or directory below the
// test's temporary directories: it makes path's tree readable and the
// directories between os.TempDir() and path searchable by all. It changes
// nothing above os.TempDir(); if that is not searchable by all, the test
// is skipped.
func openPath(t *testing.T, path string) {
	t.Helper()
	root := filepath.Clean(os.TempDir())
	for dir := root; ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		must(t, err)
		if fi.Mode().Perm()&0o001 == 0 {
			t.Skipf("%s is not searchable by other users", dir)
		}
		if dir == filepath.Dir(dir) {
			break
		}
	}
	must(t, filepath.WalkDir(path, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || p == path { // directories, and the binary itself
			return os.Chmod(p, 0o755)
		}
		return os.Chmod(p, 0o644)
	}))
	for dir := filepath.Dir(path); strings.HasPrefix(dir, root+string(filepath.Separator)); dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		must(t, err)
		must(t, os.Chmod(dir, fi.Mode().Perm()|0o011))
	}
}
