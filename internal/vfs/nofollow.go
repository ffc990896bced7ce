package vfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// ErrSymlink is wrapped by every error of a [NoFollow] file system that met a
// symbolic link (or, on Windows, another reparse point) where it does not
// follow one. Test it with errors.Is.
var ErrSymlink = errors.New("symbolic link refused (durofs never follows symbolic links inside its directory)")

// ErrNotRegular is wrapped by the error of a [NoFollow] file system's
// ReadFile or OpenFile that met a directory, FIFO, socket or device where it
// opens a file. Files are opened without blocking (O_NONBLOCK), so a FIFO
// planted in place of a file neither blocks the open nor a read; a lock
// taken on one (Lock, LockExisting) does not block either, and the read
// that follows it fails. Test it with errors.Is.
var ErrNotRegular = errors.New("not a regular file")

// IsPlanted reports whether err is a [NoFollow] file system's refusal of
// something planted where a file should be: a symbolic link
// ([ErrSymlink]) or not a regular file ([ErrNotRegular]). Such a file is
// never read through; callers treat it as unusable, like a corrupt one.
func IsPlanted(err error) bool {
	return errors.Is(err, ErrSymlink) || errors.Is(err, ErrNotRegular)
}

// Perm is the permission bits of the files and directories an FS creates.
type Perm struct {
	// File is the mode of created files (data files, temporary files and
	// lock files alike). Zero means [FilePerm].
	File fs.FileMode
	// Dir is the mode of created directories. Zero means [DirPerm].
	Dir fs.FileMode
}

// withDefaults fills zero fields with FilePerm and DirPerm.
func (p Perm) withDefaults() Perm {
	if p.File == 0 {
		p.File = FilePerm
	}
	if p.Dir == 0 {
		p.Dir = DirPerm
	}
	p.File &= fs.ModePerm
	p.Dir &= fs.ModePerm
	return p
}

// NoFollow returns the real file system confined to the directory root: for
// every path below root, no component is followed if it is a symbolic link.
// Opening, reading, writing, creating, listing, locking, syncing, renaming,
// linking and removing through a symbolic link all fail with an error
// wrapping [ErrSymlink] (and naming the path), so a symlink planted in place
// of a file or folder of the directory can neither leak what it points at nor
// be written through. Lstat still reports a symlink itself, and Remove,
// RemoveAll and Rename act on the link, not its target, so scanners can move
// such an entry aside.
//
// root itself and its ancestors are the caller's choice and may be symbolic
// links; paths outside root get the plain [OS] behaviour. Every file the FS
// creates gets mode perm.File and every directory perm.Dir, whatever the
// caller passes (the process umask still applies, as it does for open(2)).
//
// How: on Linux every path below root is resolved by openat2(2) with
// RESOLVE_NO_SYMLINKS, and changes of names (rename, link, unlink, mkdir)
// are made relative to a parent directory descriptor resolved that way, so
// the check and the use are one step (no window for a swap). Where openat2
// is missing (Linux before 5.6, or refused by a seccomp filter) and on other
// systems, each component below root is checked with Lstat before the call
// and the final one is opened with O_NOFOLLOW (not available on Windows,
// which checks it with Lstat): that refuses a planted link but leaves a short
// window in which a concurrent swap could go unnoticed.
func NoFollow(root string, perm Perm) FS {
	abs, err := filepath.Abs(root)
	if err != nil {
		abs = filepath.Clean(root)
	}
	return &noFollowFS{root: abs, perm: perm.withDefaults()}
}

// noFollowFS implements NoFollow. It embeds OS for the methods that do not
// take part in path resolution below root (directory watches) and for paths
// outside root.
type noFollowFS struct {
	OS
	root string
	perm Perm

	mu         sync.Mutex
	realRoot   string // root with its symbolic links resolved, once it exists
	probed     bool   // openat2 was probed (Linux)
	useGeneric bool   // use the check-then-use fallback (Linux: no openat2)
}

var _ FS = (*noFollowFS)(nil)

// rel returns name relative to root and true if name is strictly below root.
func (n *noFollowFS) rel(name string) (string, bool) {
	if !filepath.IsAbs(name) {
		abs, err := filepath.Abs(name)
		if err != nil {
			return "", false
		}
		name = abs
	}
	name = filepath.Clean(name)
	r, ok := strings.CutPrefix(name, n.root)
	if !ok || r == "" || !os.IsPathSeparator(r[0]) {
		return "", false
	}
	r = strings.TrimLeft(r, string(filepath.Separator))
	if r == "" {
		return "", false
	}
	return r, true
}

// real returns root with its symbolic links resolved (the root is trusted
// and may be a link; everything below it is resolved without links). It is
// computed on first use after root exists and then kept.
func (n *noFollowFS) real() (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.realRoot != "" {
		return n.realRoot, nil
	}
	r, err := filepath.EvalSymlinks(n.root)
	if err != nil {
		return "", err
	}
	n.realRoot = r
	return r, nil
}

// symlinkError is the error for a path where a symbolic link was refused.
func symlinkError(op, name string, cause error) error {
	if cause == nil {
		return &fs.PathError{Op: op, Path: name, Err: ErrSymlink}
	}
	return &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("%w: %w", ErrSymlink, cause)}
}

// isLink reports whether fi is a symbolic link or another kind of entry that
// the walker must not pass through (Windows reports non-symlink reparse
// points, such as junctions, as irregular).
func isLink(fi fs.FileInfo) bool {
	return fi.Mode()&(fs.ModeSymlink|fs.ModeIrregular) != 0
}

// checkComponents Lstats every component of rel below base, up to and
// excluding the last one (including it if final), and fails with an error
// wrapping ErrSymlink at the first link. A missing component ends the check
// successfully: the operation itself then fails or creates it. It is the
// portable (check-then-use) resolution of NoFollow.
func checkComponents(op, name, base, rel string, final bool) error {
	parts := strings.Split(rel, string(filepath.Separator))
	if !final {
		parts = parts[:len(parts)-1]
	}
	p := base
	for _, c := range parts {
		if c == "" || c == "." {
			continue
		}
		p = filepath.Join(p, c)
		fi, err := os.Lstat(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return &fs.PathError{Op: op, Path: name, Err: err}
		}
		if isLink(fi) {
			return symlinkError(op, name, fmt.Errorf("%s is a symbolic link", p))
		}
	}
	return nil
}
