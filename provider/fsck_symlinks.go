package provider

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
)

// FsckSymlink: a symbolic link inside the directory (durofs never creates
// one and never follows one; see the provider's handling per place in
// symlinks.go). Repaired by moving the link itself, never its target, to
// quarantine/ with a .reason file. Links already in quarantine/ are not
// reported.
const FsckSymlink = "symlink"

// scanSymlinks reports every symbolic link below the directory (outside
// quarantine/) and, in repair mode, moves each to quarantine/ before the
// other checks run, so they see the directory as durofs uses it.
func (r *fsckRun) scanSymlinks(ctx context.Context) error {
	qdir := filepath.Join(r.p.dir, "quarantine")
	var links []string
	err := r.p.walk(ctx, r.p.dir, func(path string, fi os.FileInfo) error {
		if fi.Mode()&fs.ModeSymlink != 0 && filepath.Dir(path) != qdir {
			links = append(links, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, path := range links {
		target, _ := os.Readlink(path) // the link's own text; its target is never opened
		f := r.add(FsckSymlink, SeverityError, path, "a symbolic link (to %q) where durofs keeps its own files; it is never followed, so what it stands for is unusable", target)
		f.Action = "fsck --repair moves the link (never its target) to quarantine/"
		if r.repair {
			dest, err := r.quarantineFile(path, "symbolic link to "+target+" (durofs never follows links in its directory)")
			r.fixed(f, err, "moved to "+dest)
		}
	}
	return nil
}
