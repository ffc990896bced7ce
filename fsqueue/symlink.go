package fsqueue

// Symbolic links planted in a queue directory. On a file system that refuses
// to follow them (vfs.NoFollow, the provider's default), every place a link
// can stand is handled so that one planted link never blocks the queue:
//
//   - a message file (<name>.json): unreadable, so List skips it like an
//     unparseable message (logged once, until it vanishes); it cannot be
//     locked either (the message file is its own lock), so ClaimNext skips
//     it with a warning and WithClaim on it fails with an error wrapping
//     vfs.ErrSymlink;
//   - a claim file (claims/<name>.json): unreadable, so it counts as a
//     corrupt claim, which ClaimNext treats as no claim and replaces by
//     rename (the link itself is replaced; its target is never written);
//   - the queue directory itself or claims/: Open fails.
//
// A directory, FIFO or socket planted in place of a message or claim file is
// handled the same way (vfs.ErrNotRegular): it does not block the open or
// the read (O_NONBLOCK), and it is skipped like a link - a message that
// cannot be read, a claim that counts as corrupt.

import (
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// planted reports whether err is a file system's refusal of something
// planted where a file of the queue should be: a symbolic link, or not a
// regular file.
func planted(err error) bool { return vfs.IsPlanted(err) }

// skipLinked logs, at most once a minute per queue, that a message was
// skipped because its file is a symbolic link, and returns nil (the message
// is not claimable).
func (q *Queue) skipLinked(name string, err error) error {
	q.linkWarn.Lock()
	defer q.linkWarn.Unlock()
	if now := time.Now(); now.Sub(q.linkWarnAt) >= time.Minute {
		q.linkWarnAt = now
		q.log.Warn("fsqueue: skipping a message file that is a symbolic link (run durofs fsck)",
			"dir", q.dir, "name", name, "err", err)
	}
	return nil
}
