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
//   - FORMAT, instances/, children/, queues/…, wal/, quarantine/, tmp/:
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
//
// durofs fsck reports every link in the directory, and fsck --repair moves
// each (the link, never its target) to quarantine/ with a reason.

import (
	"errors"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// unusableInstance reports whether err says an instance's files cannot be
// used at all (a refused symbolic link, or unparseable state), so a scan
// over many instances should skip this one rather than fail.
func unusableInstance(err error) bool {
	return vfs.IsPlanted(err) || errors.Is(err, ErrCorrupt)
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
