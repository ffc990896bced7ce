package fsqueue

// Symbolic links planted in a queue directory. On a file system that refuses
// to follow them (vfs.NoFollow, the provider's default), every place a link
// can stand is handled so that one planted link never blocks the queue:
//
//   - a message file (<name>.json): unreadable, so List skips it like an
//     unparseable message (logged once, until it vanishes);
//   - a claim file (claims/<name>.json): unreadable, so it counts as a
//     corrupt claim, which ClaimNext treats as no claim and replaces by
//     rename (the link itself is replaced; its target is never written);
//   - a shard lock file (locks/NN.lock): the messages of that shard cannot
//     be claimed (nobody can lock them); ClaimNext skips them with a
//     warning and claims other messages. WithClaim on such a message fails
//     with an error wrapping vfs.ErrSymlink.
//   - the queue directory itself or claims/ or locks/: Open fails.

import (
	"time"
)

// skipLinkedShard logs, at most once a minute per queue, that a message was
// skipped because its shard lock file is a symbolic link.
func (q *Queue) skipLinkedShard(name string, err error) error {
	q.linkWarn.Lock()
	defer q.linkWarn.Unlock()
	if now := time.Now(); now.Sub(q.linkWarnAt) >= time.Minute {
		q.linkWarnAt = now
		q.log.Warn("fsqueue: skipping a message whose shard lock file is a symbolic link (run durofs fsck)",
			"dir", q.dir, "name", name, "lock", q.lockPath(name), "err", err)
	}
	return nil
}
