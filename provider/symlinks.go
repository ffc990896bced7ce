package provider

// Symbolic links planted in a durofs directory.
//
// durofs never creates a symbolic link, and the default file system
// (vfs.NoFollow, see baseFS) never follows one below the directory: reading
// or writing through a link fails with an error wrapping vfs.ErrSymlink, and
// an atomic replace renames over a link instead of writing through it. So a
// link cannot leak what it points at nor make durofs write outside (or
// elsewhere inside) the directory. What each place does with a link:
//
//   - FORMAT, instances/, queues/…, commits/, sessions/, quarantine/, tmp/:
//     Open refuses the directory (an error naming the link).
//   - a queue message: never delivered; listing skips it like an
//     unparseable message (and a work item cannot be locked: the message
//     file is its own lock), and fsck reports it.
//   - a work item's claim: treated as an unparseable claim (no claim), and
//     replaced by the next claim.
//   - an instance folder or its lock file: the instance is skipped by fetch
//     (a warning is logged) and every call on it fails; other instances are
//     unaffected.
//   - an instance lease or a session file: treated as an unparseable lease
//     (lease package: free, replaced by the next holder; the link itself is
//     replaced, never its target).
//   - a history file: unusable like a corrupt history: a fetch returns the
//     item with history_error, and an ack cannot append to it.
//   - instance.json or state.json: treated as unparseable (the instance is
//     skipped by fetch, like one whose instance.json is damaged).
//   - a commit record (commits/<key>.json or a deletion group record): it
//     cannot be ours, so recovery moves the link to quarantine/.
//
// durofs fsck reports every link in the directory, and fsck --repair moves
// each (the link, never its target) to quarantine/ with a reason.

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// unusableInstance reports whether err says an instance's files cannot be
// used at all (a refused symbolic link, or unparseable state), so a scan
// over many instances should skip this one rather than fail.
func unusableInstance(err error) bool {
	return errors.Is(err, vfs.ErrSymlink) || errors.Is(err, ErrCorrupt)
}

// quarantineLink moves a symbolic link found where durofs expects one of
// its own files (path) into quarantine/, beside a .reason file. Rename acts
// on the link itself: its target is never read or changed.
func (p *FSProvider) quarantineLink(path, reason string) error {
	rel, err := filepath.Rel(p.dir, path)
	if err != nil {
		rel = filepath.Base(path)
	}
	name := "link-" + strings.ReplaceAll(filepath.ToSlash(rel), "/", "__") + "-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	qdir := filepath.Join(p.dir, "quarantine")
	if err := p.mkdirDurable(qdir); err != nil {
		return fmt.Errorf("quarantine %s: %w", path, err)
	}
	dest := filepath.Join(qdir, name)
	if err := p.writeFile(dest+".reason", []byte(reason+"\n")); err != nil {
		return fmt.Errorf("quarantine %s: %w", path, err)
	}
	if err := p.fs.Rename(path, dest); err != nil {
		_ = p.fs.Remove(dest + ".reason")
		if vfs.IsNotExist(err) {
			return nil // moved by someone else meanwhile
		}
		return fmt.Errorf("quarantine %s: %w", path, err)
	}
	p.log.Warn("durofs: moved a symbolic link to quarantine/", "path", rel, "to", filepath.Join("quarantine", name), "reason", reason)
	if err := p.fs.SyncDir(qdir); err != nil {
		return err
	}
	return p.fs.SyncDir(filepath.Dir(path))
}

// quarantineIfLink quarantines path if err says it is a refused symbolic
// link, and reports whether it did (then the caller treats the file as
// absent). A failed move is returned.
func (p *FSProvider) quarantineIfLink(path string, err error, what string) (bool, error) {
	if !errors.Is(err, vfs.ErrSymlink) {
		return false, nil
	}
	fi, lerr := p.fs.Lstat(path)
	if lerr != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return false, nil // the link is in a parent folder: not ours to move
	}
	if qerr := p.quarantineLink(path, what+" is a symbolic link, which durofs never follows"); qerr != nil {
		return false, qerr
	}
	return true, nil
}

// warnUnusable logs, at most once a minute per instance, that fetch skips an
// instance whose files cannot be used.
func (p *FSProvider) warnUnusable(key, instance string, err error) {
	now := time.Now()
	if last, ok := p.unusableWarned.Load(key); ok && now.Sub(last.(time.Time)) < time.Minute {
		return
	}
	p.unusableWarned.Store(key, now)
	p.log.Warn("durofs: skipping an instance whose files cannot be used (run durofs fsck)", "instance", instance, "key", key, "err", err)
}
