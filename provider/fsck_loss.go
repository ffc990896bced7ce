package provider

// Fsck and committed history: a repair never removes what a commit
// acknowledged, and never calls a directory clean that lost some of it.
//
// The committed length of an execution's history is its state.json's
// event_count: every apply writes a commit's history lines before the
// state.json that counts them, and the log record of a commit not yet
// applied is finished (a pending mark) or replayed (after a reboot) before
// the files are trusted. A history with fewer records is one of:
//
//   - restorable: the write-ahead log, since its checkpoint, still holds
//     appends that bring it back to its committed length (a power loss
//     before the replay, or damage soon after the commit). A pending_commit
//     finding; the repair appends the records from the log (AppendAt: it
//     checks that the records already there are the logged ones).
//   - lost: nothing holds the missing records any more. A history_loss
//     finding, never repaired. The counters stay as they are; bytes of a
//     lost record after the last complete line are moved to quarantine/.
//
// Only a torn tail beyond the committed length is an append nobody
// committed, and only that is trimmed (FsckTornTail).

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/wal"
)

// FsckHistoryLoss: committed history is missing. An execution's history
// holds fewer records than its state.json's event_count (the file was cut,
// emptied, removed or replaced by a link) and the write-ahead log does not
// hold the missing ones; or instance.json lists an execution without a
// state.json, or counts more events than the histories hold (an execution
// directory was removed). Never repaired, and never clean while it lasts:
// the counters are left as they are (they record what was committed), and
// the bytes of a lost record found after the last complete line are moved
// to quarantine/ with a manifest. Restore the instance's files from a
// backup, or delete the instance.
const FsckHistoryLoss = "history_loss"

// lossAction is what an operator can do about a history_loss finding.
func lossAction(key string) string {
	return "not repairable: committed events are gone; restore the instance's files from a backup, or delete it (durofs delete " +
		shellQuote(instanceIDOf(key)) + " --force); fsck never lowers the counters that record what was committed"
}

// historySeg is one logged append to an execution's history.
type historySeg struct {
	base int
	recs []history.Record
	lsn  wal.LSN // its log record
	end  wal.LSN // the end of its log record
}

// loggedHistory returns the appends to execution exec of key that the log
// holds since its checkpoint, in log order.
func (r *fsckRun) loggedHistory(key string, exec uint64) []historySeg {
	var segs []historySeg
	add := func(base int, fence uint64, raws [][]byte, ids []uint64, lsn, end wal.LSN) {
		if len(raws) == 0 || len(raws) != len(ids) {
			return
		}
		s := historySeg{base: base, lsn: lsn, end: end}
		for i, raw := range raws {
			s.recs = append(s.recs, history.Record{ID: ids[i], Epoch: fence, Payload: raw})
		}
		segs = append(segs, s)
	}
	for _, lr := range r.logged[key] {
		rec := lr.rec
		switch rec.Kind {
		case "":
			if rec.Key == key && rec.ExecutionID == exec {
				add(rec.HistoryBase, rec.Fence, rec.History, rec.HistoryIDs, lr.lsn, lr.end)
			}
		case kindGW:
			for _, pt := range rec.GW.Parts {
				if pt.Key == key && pt.Exec == exec {
					add(pt.HistoryBase, pt.Fence, pt.History, pt.HistoryIDs, lr.lsn, lr.end)
				}
			}
		}
	}
	return segs
}

// restorableTo returns how many records the history have holds once the
// logged appends segs are redone in order: an append applies if its base
// is within what the history holds by then, and its records already there
// are the ones logged (as AppendAt checks). It stops at the first that
// does not apply.
func restorableTo(segs []historySeg, have []history.Record) int {
	n := len(have)
	for _, s := range segs {
		if s.base > n {
			break
		}
		for i := s.base; i < min(n, len(have), s.base+len(s.recs)); i++ {
			r, l := have[i], s.recs[i-s.base]
			if r.ID != l.ID || r.Epoch != l.Epoch || !bytes.Equal(r.Payload, l.Payload) {
				return n
			}
		}
		n = max(n, s.base+len(s.recs))
	}
	return n
}

// restoreFromLog redoes the logged appends segs on the history at hp (under
// the instance flock), after making their log records durable.
func (r *fsckRun) restoreFromLog(hp string, segs []historySeg, n int) (restored int, err error) {
	log := history.Open(r.p.fs, hp)
	for _, s := range segs {
		if s.base > n {
			break
		}
		if s.base+len(s.recs) <= n {
			continue
		}
		if err := r.p.wal.SyncThrough(s.lsn, s.end); err != nil {
			return restored, err
		}
		k, err := log.AppendAt(s.base, s.recs)
		if err != nil {
			return restored, err
		}
		restored += k
		n = s.base + len(s.recs)
	}
	return restored, nil
}

// checkShortHistory handles an execution whose history holds fewer valid
// records than the committed count (fsckExec.recs, scan: what was read).
// It returns the history as it is afterwards.
func (r *fsckRun) checkShortHistory(e *fsckExec, key, hp string, scan history.Scan, committed int) history.Scan {
	n := len(scan.Records)
	segs := r.loggedHistory(key, e.id)
	if restorableTo(segs, scan.Records) >= committed {
		f := r.add(FsckPendingCommit, SeverityWarning, hp, "history of %q execution %d holds %d of its %d committed record(s); the write-ahead log holds the rest",
			instanceIDOf(key), e.id, n, committed)
		f.Action = "fsck --repair restores them from the log (so does the replay when the directory is first opened after a reboot)"
		if !r.repair {
			return scan
		}
		k, err := r.restoreFromLog(hp, segs, n)
		r.fixed(f, err, fmt.Sprintf("restored %d record(s) from the write-ahead log", k))
		if err == nil {
			if s, err := history.Open(r.p.fs, hp).Read(); err == nil {
				return s
			}
		}
		return scan
	}
	e.lost = true
	f := r.add(FsckHistoryLoss, SeverityError, hp, "history of %q execution %d holds %d record(s) but %d were committed (state.json event_count): committed events are lost (the file was cut, emptied, removed or replaced)",
		instanceIDOf(key), e.id, n, committed)
	f.Action = lossAction(key)
	if scan.TornBytes == 0 {
		return scan
	}
	f.Detail += fmt.Sprintf("; the %d byte(s) after the last complete record are the start of a lost record", scan.TornBytes)
	if !r.repair {
		f.Action += "; fsck --repair moves those bytes to quarantine/"
		return scan
	}
	dest, err := r.quarantineTail(hp, scan, committed)
	if err != nil {
		f.Action += "; moving the bytes after the last complete record to quarantine/ failed: " + err.Error()
		r.log.Warn("durofs fsck: quarantine failed", "path", f.Path, "err", err)
		return scan
	}
	f.Action += fmt.Sprintf("; the %d byte(s) after the last complete record were moved to %s (manifest %s.reason)", scan.TornBytes, dest, dest)
	scan.TornBytes = 0
	return scan
}

// quarantineTail moves the torn tail of the history at hp (the start of a
// lost committed record) to quarantine/: a copy with its manifest first,
// both durable, then the truncation. A crash in between leaves the tail in
// place, to be copied again.
func (r *fsckRun) quarantineTail(hp string, scan history.Scan, committed int) (string, error) {
	data, err := r.p.fs.ReadFile(hp)
	if err != nil {
		return "", err
	}
	if int64(len(data)) != scan.ValidSize+scan.TornBytes {
		return "", fmt.Errorf("%s changed while being checked", hp)
	}
	dest, rel, err := r.quarantineDest(hp)
	if err != nil {
		return "", err
	}
	reason := fmt.Sprintf("the start of a lost committed history record: the history holds %d record(s) of %d committed; these bytes followed its last complete record", len(scan.Records), committed)
	manifest := r.manifest(hp, reason, "offset: "+strconv.FormatInt(scan.ValidSize, 10), "length: "+strconv.FormatInt(scan.TornBytes, 10))
	if err := r.p.writeFile(dest+".reason", manifest); err != nil {
		return "", err
	}
	if err := r.p.writeFile(dest, data[scan.ValidSize:]); err != nil {
		return "", err
	}
	if _, err := history.Open(r.p.fs, hp).Repair(); err != nil {
		return "", err
	}
	return rel, nil
}

// quarantineDest returns a new path in quarantine/ for path (creating the
// directory), and that path relative to the checked directory.
func (r *fsckRun) quarantineDest(path string) (dest, rel string, err error) {
	qdir := filepath.Join(r.p.dir, "quarantine")
	if err := r.p.mkdirDurable(qdir); err != nil {
		return "", "", fmt.Errorf("create %s: %w", qdir, err)
	}
	name := quarantineName(r.rel(path))
	return filepath.Join(qdir, name), filepath.ToSlash(filepath.Join("quarantine", name)), nil
}

// manifest is the text of a quarantined file's .reason file: where it
// came from, why, when and by whom, and any extra "key: value" lines.
func (r *fsckRun) manifest(path, reason string, extra ...string) []byte {
	text := fmt.Sprintf("path: %s\nreason: %s\n", filepath.ToSlash(r.rel(path)), reason)
	for _, x := range extra {
		text += x + "\n"
	}
	return fmt.Appendf([]byte(text), "quarantined_at: %s\nby: durofs fsck --repair (pid %d)\n", time.Now().UTC().Format(time.RFC3339), os.Getpid())
}

// checkInstanceLoss reports committed history that instance.json records
// and the executions no longer hold: listed executions without a
// state.json, and total_events above what the histories hold (and, for
// executions whose history is short, their committed counts). It returns
// whether it found loss. While a replay is due, the files may lack what the
// log holds, so nothing is judged.
func (r *fsckRun) checkInstanceLoss(key string, inf *instanceFile, execs []*fsckExec) bool {
	if r.replayDue {
		return false
	}
	var gone []uint64
	var total uint64
	byID := map[uint64]*fsckExec{}
	for _, e := range execs {
		byID[e.id] = e
		if !e.histOK {
			return false // unreadable: reported by itself, and not counted
		}
		total += committedLen(e)
	}
	for id := range inf.Executions.All() {
		if e := byID[id]; e == nil || !e.stateExists {
			gone = append(gone, id)
		}
	}
	var what []string
	if len(gone) > 0 {
		what = append(what, fmt.Sprintf("it lists execution(s) %v, which have no state.json", gone))
	}
	if inf.TotalEvents > total {
		what = append(what, fmt.Sprintf("its total_events is %d but the executions hold (or committed) %d", inf.TotalEvents, total))
	}
	if len(what) == 0 {
		return false
	}
	f := r.add(FsckHistoryLoss, SeverityError, r.p.instFilePath(key), "instance %q: %s: committed executions or events are lost (an execution directory was removed?)",
		instanceIDOf(key), strings.Join(what, "; "))
	f.Action = lossAction(key)
	return true
}
