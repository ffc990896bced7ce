// Package history is an append-only log of self-checking records, one file per
// log. A record is an id, an epoch and an opaque payload; the package knows
// nothing else about what it stores. All file I/O goes through a [vfs.FS].
//
// # On-disk format
//
// One record per line:
//
//	<crc> <id> <epoch> <payload>\n
//
// crc is the CRC-32C (Castagnoli) of the bytes "<id> <epoch> <payload>"
// (everything after the first space, without the '\n'), written as exactly 8
// lowercase hex digits. id and epoch are unsigned decimal numbers without
// leading zeros. payload is any bytes except '\n' (the provider stores compact
// JSON, so `cut -d' ' -f4-` yields JSON lines). The encoding is canonical:
// every valid line is exactly what [EncodeRecord] produces for its record.
//
// A reader splits the file at '\n'. Every complete line must be a valid
// record. The bytes after the last '\n' are a torn tail: an incomplete final
// line, a zero-filled region, or a fragment followed by zeros. A torn tail is
// not an error; [Log.Read] reports its length and skips it. A complete line
// that fails its CRC or the format is corruption ([CorruptError]): it is
// reported, never truncated automatically.
//
// # Why a torn tail is expected
//
// A writer appends with one write(2) of whole lines and then fsyncs, but that
// write is not atomic across a crash:
//
//   - kill -9 can split even a small O_APPEND write at a 4096-byte page
//     boundary: the file keeps a prefix of the write.
//   - A power loss before the fsync can keep any prefix of the unsynced data,
//     or extend the size over blocks whose data never reached the disk, which
//     then read as NUL bytes (xfs; ext4 in writeback mode).
//   - A reader running while another process appends sees the write's prefix
//     that has landed so far.
//
// In each case the file is the old records followed by a prefix of the new
// lines. A prefix of whole lines is a set of complete valid records; the rest
// holds no '\n' (neither a line fragment nor NUL bytes contain one), so it is
// exactly the torn tail. The CRC catches a complete line whose bytes are not
// what was written. One power-loss outcome is reported as corruption instead
// of a torn tail: a multi-page append whose middle page is lost while a later
// page, holding a '\n', survives (possible where data pages are written back
// out of order). The line spanning the hole then fails its CRC; it is not
// guessed at.
//
// # Appending and crashes
//
// [Log.Append] and [Log.AppendAt] do, in order:
//
//  1. Read the file and validate (ids, positions, payloads). Nothing is
//     written if validation fails. A crash here changes nothing.
//  2. If there is a torn tail, truncate the file to its valid prefix and
//     fsync. The tail must go before the next append, or the new first line
//     would be glued onto the fragment and form a complete, corrupt line.
//     A kill -9 or power loss here leaves the tail either present or
//     removed: the truncation never touches bytes before the valid prefix,
//     and a remaining or partly removed tail still has no '\n'. Both read
//     as the same records.
//  3. If the file is missing, create its parent directories and open it with
//     O_CREATE. A crash here leaves no file or an empty file (or empty
//     directories): both read as an empty log.
//  4. Write all new lines with one write call. A crash leaves the old records,
//     a prefix of the new records and perhaps a torn tail (see above).
//  5. fsync the file. Before it returns, a power loss may still lose any part
//     of step 4, with the same possible results. An fsync error is returned
//     and never retried (the kernel may already have dropped the data and
//     marked it clean); the fd is closed.
//  6. If the file was created in step 3, fsync its directory (and the parent
//     of every directory created). Before that, a power loss may lose the
//     whole file: an empty log again. The directory is also fsynced when the
//     file existed but held no valid record, since its creator may have died
//     before this step.
//
// Only after step 6 returns nil are the records durable. An Append that
// failed or never returned has thus left some prefix of its records (possibly
// none, possibly all), so blindly repeating it is wrong; retrying it fails
// with [ErrDuplicateID] if any of its records landed.
//
// The redo is [Log.AppendAt]: a caller that first made its intent durable
// (a write-ahead log record holding base and the records) redoes it after
// any crash.
// AppendAt counts the valid records n, checks that the ones already present
// at positions [base, n) are exactly the first n-base of the batch, and
// appends only the rest. Because every crash state above is "old records +
// a prefix of the batch + a torn tail", the redo always finds a prefix, and
// repeating it any number of times, or crashing inside it, converges on the
// same file. When it finds records already present it fsyncs the file and
// its directory before returning, because a process killed between steps 4
// and 5 or 5 and 6 left them in the page cache only. One limit remains: after
// an fsync error Linux may go on serving from its cache data that never
// reached the disk, and a redo that reads the file cannot tell (fsyncgate).
//
// [Log.Repair] is steps 1 and 2 alone. On a corrupt log it returns the
// [CorruptError] and changes nothing.
//
// # Reading and appending after a mark
//
// A log is only ever appended to: a torn tail is cut before the next append,
// a redo finds the records already there, a replay rewrites records with the
// bytes they had. So a prefix of complete records that a reader once saw
// stays the file's prefix for as long as the file is the same log (not
// removed and created anew). A [Mark] is such a position; [Log.ReadAfter]
// and [Log.AppendAtMark] read only the bytes after it, so a reader that keeps
// what it decoded pays per call for what was appended since, not for the
// whole log. They trust the mark - whether the file is still the same log is
// the caller's to know - and check only what needs no reading of the prefix:
// the file reaches the mark and a line ends just before it ([ErrMoved]
// otherwise). The zero Mark reads the whole log.
//
// # Concurrency
//
// A [Log] is not safe for concurrent appends by itself: callers serialize
// Append, AppendAt and Repair on a file, across goroutines and processes,
// with a lock (the provider's instance lock). As a best-effort guard, an
// append or repair fails with [ErrConflict] if the file size changed between
// its read and its write. Read and Stat need no lock and may run while another
// process appends; they then see a torn tail, which is not an error. Durability
// is a property of the [vfs.FS]: with [vfs.NoSync] the fsyncs are no-ops and
// the log survives kill -9 but not power loss.
package history
