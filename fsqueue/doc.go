// Package fsqueue is a crash-safe, multi-process message queue kept in one
// directory: a folder of immutable, ULID-named message files plus per-message
// peek-locks ("claims"). Several processes on one host may share a queue
// directory; any of them may be killed (kill -9) at any instant, and with a
// syncing [vfs.FS] a power loss loses nothing that a call reported as done.
// The package knows nothing about what the messages mean.
//
// # On-disk format
//
//	<dir>/fsqueue.json           {"format":"fsqueue","version":3,"index_attr":"…"}, created once
//	                             (create-exclusive); a queue of another version, or opened
//	                             with another Options.IndexAttr, is refused
//	<dir>/<name>.json            one immutable message; <name> is <ULID>.<visible>.<route>
//	<dir>/.staged-<name>.json    a message written but not yet published ([Queue.Stage], [Queue.Publish])
//	<dir>/claims/<name>.json     the claim (peek-lock lease) of a message, if it was ever claimed
//	<dir>/.tmp-*, claims/.tmp-*  temporary files ([vfs.TempPrefix]); removed by [Queue.Sweep]
//
// A message's name carries everything finding work needs, so that a
// listing of the directory builds the queue's index without opening a file
// (name.go): the message's ULID (26 characters of Crockford base32, upper
// case; it orders the queue), its visibility time (ms since the epoch,
// clamped to [0, MaxVisibleAtMs], 10 base32 digits) and its route (the
// first 64 bits of the SHA-256 of its IndexAttr attribute's value, 0 for
// none: [RouteOf]; 13 base32 digits), for example
//
//	01JDQ8Z3N7W1Y5C2V9R4T6M8KE.01JDQ8Z3N7.A4N8T2C9Q1W3E.json
//
// A message file holds
//
//	{"name":"<name>","visible_at_ms":N,"enqueued_at_ms":N,"attrs":{"k":"v",…},"payload":<raw JSON>}
//
// and every read checks that the body agrees with the name it was found
// under (name field, visibility time, route): a file that does not is
// damaged ([ErrCorrupt]), listed but never handed out. [Queue.Encode] and
// the calls that write a message name it, or check the name it was given
// ([Queue.NewName]).
//
// and a claim file holds
//
//	{"token":"<name>.<uuid>","owner":"…","locked_until_ms":N,"attempt":N,"visible_at_ms":N,"state":"…","data":<raw JSON>}
//
// Every scanner skips directory entries whose name is not exactly
// "<name>.json" for a valid name, so temporary, staged and configuration
// files are never mistaken for messages or claims. Timestamps are milliseconds since the
// Unix epoch, read from the queue's [clock.Clock].
//
// A message is visible when its effective visibility time (the claim's
// VisibleAtMs if non-zero, else the message's) is not after now. It is
// claimable when it is visible and it has no claim, or its claim has an empty
// token, or its claim's lease has expired, and the claim's State is empty.
//
// # Mutual exclusion
//
// Claims are read, checked and written only while the message's lock is
// held: an flock on the message file itself, taken through
// [vfs.FS.LockExisting] (which also excludes goroutines of one process and
// never creates the file), and the clock is read after the lock is held, so
// a lease is never computed before waiting and never handed out already
// expired. The flock, not a write-then-verify read, is the mutual
// exclusion: of two processes racing for one message, the second to get the
// flock reads the first one's claim and skips the message. The kernel
// releases an flock when its holder dies, so a killed process never leaves a
// stale lock; its leases simply expire.
//
// Each message is its own lock, so a process stopped (SIGSTOP, a frozen
// cgroup) while it holds one holds up only that message - which is its own
// claim, or one it was about to claim - and never another process's work:
// ClaimNext skips a busy message (waiting at most 20 ms in all when nothing
// else is claimable; with a [Recycler], a take never reuses a file whose
// flock is held, so this stays true). There are no lock files to create or
// clean up. Only a holder of a message's lock deletes the message, so once
// it is gone nothing
// can change its claim any more: [Queue.WithClaim] then runs without a lock
// and a leftover claim is inert.
//
// # Crash analysis
//
// Below, "kill -9" means the process dies but the kernel (and its page cache)
// survives; "power loss" means everything not fsynced may be lost.
//
// [Queue.Enqueue] uses [vfs.CreateExclusive]:
//
//  1. write <dir>/.tmp-<name>.json-<uuid> and fsync it. A crash here leaves a
//     missing, empty or partial temporary file: it does not match the message
//     pattern, nobody reads it, and Sweep removes it.
//  2. link(2) it to <dir>/<name>.json (EEXIST: the name is taken; Enqueue
//     fails, or retries with a fresh name if it chose the name). A partially
//     written message never becomes visible, because the file gets its final
//     name only after its content is fsynced. After a kill -9 right after the
//     link, the message is complete and visible, and the temporary name is a
//     second hard link that Sweep removes without affecting the message.
//  3. unlink the temporary name.
//  4. fsync <dir>. Before this, a power loss may drop the new entry: the
//     message is then gone, but Enqueue had not returned, so nobody relied on
//     it. After it, the message is durable.
//
// [Queue.Stage] writes a temporary file, fsyncs it and renames it to
// .staged-<name>.json, without a directory fsync (the caller stages a batch,
// calls [Queue.SyncDir] once, and only then writes its commit record). The
// staged name therefore refers either to nothing or to complete content. A
// staged file lost to a power loss before SyncDir belongs to a commit that
// was never recorded. [Queue.Publish] renames .staged-<name>.json to
// <name>.json in the same directory: at every instant exactly one of the two
// names exists, so after a kill -9 a redo either finds the staged file and
// publishes it, or finds it gone and returns false. Because publishing
// consumes the staged file, a redo cannot resurrect a message that a
// consumer already took and deleted. Publish does not fsync the directory;
// the caller calls SyncDir before it forgets its commit record (after a
// power loss before that, the staged file may be back and the redo publishes
// it again). Journaling file systems (ext4, xfs) persist operations on one
// directory in order, so a consumer's durable delete of <name>.json implies
// that the rename that created it is durable too.
//
// [Queue.Delete] unlinks <name>.json first and claims/<name>.json second,
// without directory fsyncs (the caller calls SyncDir and SyncClaimsDir once
// per batch). A kill -9 between the two leaves an orphan claim with no
// message; Sweep removes it (unless the caller gave it a State). The
// opposite order would be wrong: a crash after removing only the claim would
// leave a visible, unclaimed message that would be delivered again. A power
// loss before the caller's SyncDir may undo the unlink; the message is then
// delivered again (at-least-once), which is why callers make redo idempotent
// and consumers de-duplicate by name.
//
// [Queue.ClaimNext], [Queue.Renew] and [Queue.Abandon] change a claim under
// the message's flock. In a durable queue (the default) they use
// [vfs.WriteFile] (temporary file, fsync, rename over claims/<name>.json,
// fsync claims/):
//
//   - A crash before the rename leaves the previous claim in place and a
//     temporary file for Sweep: no one got the message (ClaimNext), the lease
//     was not extended (Renew) or the message stays locked until its lease
//     expires (Abandon); none of these calls returned success.
//   - A kill -9 after the rename but before the call returns leaves the new
//     claim. For ClaimNext nobody holds it, so the message is redelivered
//     when the lease expires, with Attempt incremented once more: Attempt
//     counts handed-out leases, including those lost to crashes.
//   - A power loss before the directory fsync may lose the new claim. A lost
//     claim only means the message is delivered again (at-least-once): the
//     old holder's later Renew or Abandon fails with [ErrNotHolder] once
//     someone else has claimed the message, and its ack must check its token
//     under [Queue.WithClaim].
//   - ClaimNext verifies that the message still exists after writing the
//     claim; if it vanished (deleted concurrently), it removes the claim and
//     moves on, so it never returns a claim for a deleted message that it
//     could have noticed. If the lease turns out to be expired right after
//     the write (a clock jump or a very short lockFor), the previous claim is
//     restored and the message is skipped, so ClaimNext never returns an
//     expired lease.
//
// # Claims written in place
//
// With [Options].VolatileClaims (the caller's commit protocol makes claims
// redundant after a power loss, as durofs's log does) a claim that exists
// is overwritten in place ([vfs.Overwrite]: one write at offset 0, padded
// with spaces to the file's size), and a new one is created by an unsynced
// atomic replace padded to 512 bytes, so that later versions fit. A claim
// then costs one inode for the message's whole life instead of one per
// change: creating files is what costs most on a busy ext4 (without a
// journal, each creation scans past the inodes freed in the last minute,
// BENCHMARKS.md). Every writer and every deciding reader holds the
// message's flock, so no reader that decides anything sees a write half
// done. What a crash leaves:
//
//   - kill -9 during the write: a write of one page to the page cache is not
//     interrupted (a fatal signal is checked between pages), and a file
//     larger than a page is replaced instead ([vfs.Overwrite]), so the file
//     has the old or the new content;
//   - a failed or short write, or a failed touch of claims/ after it: the old
//     content is written back, best effort, and the call fails; a claim that
//     is left unparseable is no claim (redelivery, at-least-once);
//   - power loss: volatile claims are never synced, so the file may come back
//     old, new, empty or torn; an unparseable claim is no claim, and the
//     caller's log decides what was acknowledged.
//
// An in-place write changes neither the inode nor the size of the claim,
// nor claims/, so the writer touches claims/ ([vfs.FS.Touch]) and a
// pre-filter cache without a directory watch (below) trusts a file's
// identity only if its content was read at least 50 ms after the file's last
// change; a cache with one sees the write itself.
//
// # Recycled files
//
// With [Options].Recycler, [Queue.Delete], [Queue.DeleteMessage] and
// [Queue.DeleteClaim] (of a message that is gone) move a removed file into
// the Recycler's pool instead of unlinking it, and [Queue.StageData] and a
// new volatile claim take their file from the pool instead of creating one:
// a busy queue then neither allocates nor frees an inode per message. The
// [Recycler] documents the six rules that make this invisible: only names
// that never come back are recycled, so every reader of a message, staged
// or claim file checks after reading that its name still exists (if not,
// the bytes may be another file's, and the file counts as removed); a
// removed file is reused only after the directory it was removed from has
// been fsynced ([Recycler.Promote], in the background), so a power loss
// cannot bring an old name back over a reused inode; a taken file is
// written under a private name and renamed to its target only when
// complete; a pool is used only in the boot that filled it, so an inode
// that a power loss left with two names is never written into; the pool is
// bounded; and a file whose flock is held is never taken. What a crash
// leaves is what it left without recycling: a rename into or out of the
// pool is atomic, a removed name is as gone as an unlinked one, and the
// pool's own files are never read.
//
// # Clock steps
//
// Claim leases and visibility times are wall-clock deadlines judged by the
// clock of the process deciding, under the message's flock; exclusion never
// depends on the clock (the flock and the token do). When the host's clock
// steps by Δ (designed and tested for |Δ| up to one lease length):
//
//   - Forward: claims expire up to Δ early, so another process may claim a
//     message that is still being worked on (at-least-once). The previous
//     holder's Renew and Abandon then fail with [ErrNotHolder], and an ack
//     that checks its token under [Queue.WithClaim] is refused. Delayed
//     messages become visible up to Δ early.
//   - Back: claims last up to Δ longer (a dead holder's claim is free again
//     at most lockFor + Δ after it was taken or renewed), and every message
//     not yet visible at the new time - including one enqueued for "now"
//     just before the step - becomes visible up to Δ later.
//
// # The index
//
// The queue keeps an index of its messages in memory (index.go): 32 bytes
// per message - the ULID, visibility time and route of its name - in sorted
// blocks of 1024, each with the least visibility time of its messages and a
// Bloom filter of their routes. [Queue.Visible] walks the messages visible
// at a time in name order and skips blocks with nothing due;
// [Queue.ListRoute] finds one route's messages by probing each block's
// filter. The first listing streams the directory ([vfs.ScanDir]: getdents
// into one reused buffer on Linux) and parses names in place, so building
// the index of a million messages allocates the index and nothing else; it
// opens no file. A block costs its whole capacity (about 34 KiB), and
// every block but the last is kept at least half full (a block that a
// removal leaves below half is merged with a neighbour or shares its
// entries), so the index costs about 34 bytes per message as a listing
// builds it and at most 68, plus one block, however messages came and
// went. The index also names the directory's staged and temporary files,
// so that [Queue.Staged] and [Queue.Sweep] of a Queue that keeps one
// ([Queue.Indexed]) list nothing; [Queue.SweepClaims] sweeps claims/ only,
// for sweepers that keep no index. Message bodies are read only by [Queue.Get] and
// [Queue.Header] (which fetches use for the messages they hand out or must
// inspect), through a cache bounded in entries and bytes; parsed claims are
// cached the same way (bounded). Deferrals (deferred.go): a claim abandoned
// with a delay, or a [Queue.Defer], hides a message from [Queue.Due] in this
// process until its time, without any read; the deferral is dropped on any
// change of the claim seen through this Queue or its claims/ watch.
//
// On Linux a directory watch (inotify) reports every process's changes,
// which are applied to the index (cost proportional to the changes); the
// directory is listed again only after a watch overflow, and watched and
// listed anew once the watch reports it removed or moved away (replaced: the
// old watch would never report on the new directory; the watch of claims/,
// which did not itself move, is dropped with it). A watch follows a
// directory, not its path: replacing a directory above the queue's (its
// parent, say, by mv root root.old; mv root.new root) under a running
// process is not noticed, and is not supported - stop the processes first,
// as the provider requires for its whole directory. Elsewhere, or
// without a watch, the index is rebuilt when the directory's mtime changed
// since the last listing, or the last listing was taken less than 50 ms
// after that mtime (ext4 timestamps are coarse, so a file added in the same
// tick as the listing would not change the mtime; the margin makes the
// cache safe) - two seconds more when the mtime is a whole second, as on
// file systems whose timestamps are (FAT's are two seconds). An error while
// bringing the index up to date drops it: the next call lists the directory
// again; the index is never left valid but incomplete. ClaimNext caches the listing of claims/ and parsed claim files
// the same way. On Linux a watch of claims/ that also reports writes in
// place (inotify IN_MODIFY) keeps both exact: the events, drained once per
// pass, drop the entry of every claim file added, removed or written since
// it was read, so a claim that did not change is never read or stat'ed
// again however busy claims/ is (a read that overlapped another goroutine's
// drain is not cached: the drain may have taken the event that would have
// dropped it). Without a watch, parsed claims are keyed by the claim file's
// identity (inode, size, mtime, ctime), trusted only for content read at
// least 50 ms after the file's ctime (a claim rewritten in place keeps its
// inode and size, and a second write in one timestamp tick would keep its
// times too). These comparisons are between file-system timestamps and the real
// time ([time.Now]), not the injected clock. The caches only decide which
// messages are worth trying: every decision to hand out a message is made on
// a fresh read of its claim under the message's flock.
package fsqueue
