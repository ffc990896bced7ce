package provider

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/durofs/durofs/internal/vfs"
)

// ErrInvalidOptions is wrapped by Open's error for Options it cannot use.
var ErrInvalidOptions = errors.New("invalid options")

// baseFS is the file system a provider on dir does its I/O through:
// Options.fs if set (tests and tools, internal/provhook), else the real file system confined to dir,
// where no symbolic link below dir is ever followed (a link planted in place
// of a queue message, lease, lock, history file, instance folder, commit
// record or one of the top-level folders is refused with an error wrapping
// vfs.ErrSymlink; see symlinks.go), and every file and directory is created
// with Options.FileMode and Options.DirMode. Because all creation goes
// through this one FS - data files, temporary files of atomic replaces,
// flock lock files, directories - no caller chooses a mode of its own.
func baseFS(dir string, opts Options) vfs.FS {
	if opts.fs != nil {
		return opts.fs
	}
	return vfs.NoFollow(dir, vfs.Perm{File: opts.FileMode, Dir: opts.DirMode})
}

// checkModes validates FileMode and DirMode: permission bits only, and
// enough for the owner to use what it creates.
func (o Options) checkModes() error {
	for _, m := range []struct {
		name  string
		mode  fs.FileMode
		needs fs.FileMode
	}{{"FileMode", o.FileMode, 0o600}, {"DirMode", o.DirMode, 0o700}} {
		if m.mode == 0 {
			continue
		}
		if m.mode&^fs.ModePerm != 0 {
			return fmt.Errorf("%w: %s %v has bits other than permissions", ErrInvalidOptions, m.name, m.mode)
		}
		if m.mode&m.needs != m.needs {
			return fmt.Errorf("%w: %s %#o does not give the owner %#o", ErrInvalidOptions, m.name, uint32(m.mode), uint32(m.needs))
		}
	}
	return nil
}
