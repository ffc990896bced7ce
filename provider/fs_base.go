package provider

import "github.com/durofs/durofs/internal/vfs"

// baseFS is the file system a provider on dir does its I/O through:
// Options.FS if set (tests), else the real file system confined to dir,
// where no symbolic link below dir is ever followed (a link planted in place
// of a queue message, lease, lock, history file, instance folder, commit
// record or one of the top-level folders is refused with an error wrapping
// vfs.ErrSymlink), and files and directories are created with the modes of
// Options.
func baseFS(dir string, opts Options) vfs.FS {
	if opts.FS != nil {
		return opts.FS
	}
	return vfs.NoFollow(dir, vfs.Perm{})
}
