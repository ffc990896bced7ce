package wal

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/durofs/durofs/internal/failpoint"
	"github.com/durofs/durofs/internal/vfs"
)

// The shared page, dir/group (package doc, "One global order" and "Group
// commit across processes"): 64-bit words every process maps shared and
// nobody syncs.
const (
	groupName  = "group"
	groupBytes = 4096

	wMagic  = 0 // groupMagic once set up
	wSynced = 1 // LSN S:X: a sync of segment S that began when every frame below X was written succeeded
	wFrom   = 2 // LSN S:O: every publisher of a mark in S had S open since the tail was at most O
	wLead   = 3 // wall-clock ns at which the leading process claimed the next sync, or 0
	wDone   = 4 // counts finished syncs; waiters wait on it
	wTail   = 5 // LSN: where the next frame goes; frames below it are reserved
	wMode   = 6 // the syncing mode of the processes that have the log open (modeDurable, modeNoSync; 0: not set yet, Options.AnyMode)
	wPoison = 7 // nonzero from a failed sync until a replay's ClearPoison: the poison mark that needs no free space
	wSlot0  = 8 // wSlot0+i: process slot i's in-flight reservation start, or 0

	// MaxProcesses is how many processes can have one log open at a time
	// (one in-flight word each).
	MaxProcesses = 64
	wStamp       = wSlot0 + MaxProcesses // the last value Stamp returned
	groupWords   = wStamp + 1

	groupMagic = 0x32304347_4f525544 // "DUROGC02"

	// A fresh lead makes others wait at most leadFactor times this process's
	// mean fdatasync time, within [minLeadWait, maxLeadWait].
	leadFactor  = 4
	minLeadWait = 2 * time.Millisecond
	maxLeadWait = 50 * time.Millisecond
)

// group is this process's mapping of the group-commit page.
type group struct {
	f vfs.File
	w vfs.Words
}

// openGroup maps dir/group, creating it. It fails with vfs.ErrNoMap on an FS
// that cannot map files shared.
func openGroup(fsys vfs.FS, dir string) (*group, error) {
	f, err := fsys.OpenFile(filepath.Join(dir, groupName), os.O_RDWR|os.O_CREATE, vfs.FilePerm)
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", groupName, err)
	}
	g, created, err := mapGroup(f)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if created {
		if err := fsys.SyncDir(dir); err != nil {
			g.close()
			return nil, fmt.Errorf("wal: open %s: %w", groupName, err)
		}
	}
	return g, nil
}

// mapGroup maps the page, first writing it out (and reporting created) if
// the file is shorter than a page.
func mapGroup(f vfs.File) (g *group, created bool, err error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("wal: open %s: %w", groupName, err)
	}
	if created = fi.Size() < groupBytes; created {
		// Written, not truncated, and synced with its directory entry:
		// the page's blocks exist, so that a store into the mapping never
		// needs space (on a full disk it would be SIGBUS), and it is there
		// after a power loss. Only a process holding open.lock gets here
		// (Open), so no mapped word is overwritten.
		if _, err := f.Seek(fi.Size(), io.SeekStart); err != nil {
			return nil, false, fmt.Errorf("wal: open %s: %w", groupName, err)
		}
		if _, err := f.Write(make([]byte, groupBytes-fi.Size())); err != nil {
			return nil, false, fmt.Errorf("wal: open %s: %w", groupName, err)
		}
		if err := f.Sync(); err != nil {
			return nil, false, fmt.Errorf("wal: open %s: %w", groupName, err)
		}
	}
	w, err := vfs.MapWords(f, groupWords)
	if err != nil {
		return nil, false, fmt.Errorf("wal: map %s: %w", groupName, err)
	}
	return &group{f: f, w: w}, created, nil
}

func (g *group) close() {
	_ = g.w.Close()
	_ = g.f.Close()
}

// live reports whether the mapping still works (Close, or a simulated
// power loss in tests, leaves words that read as zeros and never change).
func (g *group) live() bool { return g.w.Load(wMagic) == groupMagic }

// store sets word i to v (a compare-and-swap loop; Words has no plain store).
func (g *group) store(i int, v uint64) {
	for {
		old := g.w.Load(i)
		if old == v || g.w.CompareAndSwap(i, old, v) || !g.live() {
			return
		}
	}
}

// Values of wMode.
const (
	modeDurable = 1
	modeNoSync  = 2
)

// reset sets up the page for a process that has the log alone: every word
// zero but the poison word (cleared only by the replay it calls for) and
// the last stamp (so that stamps go on increasing across a restart even if
// the clock stepped back), then the tail and the mode, then the magic that
// lets others use it.
func (g *group) reset(tail LSN, mode uint64) {
	var poison, stamp uint64
	if g.live() {
		poison, stamp = g.w.Load(wPoison), g.w.Load(wStamp)
	}
	g.store(wMagic, 0)
	for i := 1; i < groupWords; i++ {
		g.store(i, 0)
	}
	g.store(wPoison, poison)
	g.store(wStamp, stamp)
	g.store(wTail, uint64(tail))
	g.store(wMode, mode)
	g.store(wMagic, groupMagic)
}

// writtenThrough returns an LSN W below which every reserved frame has been
// written: the tail, lowered to the start of any reservation still being
// written. The tail is read first: a frame reserved before that read had its
// slot set before its reservation, so it is either still in its slot (and
// bounds W) or written.
func (g *group) writtenThrough() LSN {
	w := LSN(g.w.Load(wTail))
	for i := range MaxProcesses {
		if v := LSN(g.w.Load(wSlot0 + i)); v != 0 && v < w {
			w = v
		}
	}
	return w
}

// raise sets word i to v if v is larger (a compare-and-swap loop).
func (g *group) raise(i int, v uint64) {
	for {
		old := g.w.Load(i)
		if v <= old || g.w.CompareAndSwap(i, old, v) || !g.live() {
			return
		}
	}
}

// finish counts a finished sync and wakes the processes waiting for one.
func (g *group) finish() {
	for {
		d := g.w.Load(wDone)
		if g.w.CompareAndSwap(wDone, d, d+1) || !g.live() {
			break
		}
	}
	g.w.Wake(wDone)
}

// covered reports whether the marks synced and from prove durable this
// process's frames in [lo, end): both marks in the frames' segment, the
// frames at or after from, and ending at or before synced.
func covered(synced, from, lo, end LSN) bool {
	seg := end.Segment()
	return synced.Segment() == seg && from.Segment() == seg && lo.Segment() == seg &&
		from <= lo && end <= synced
}

// step is what a process waiting for its frames does next.
type step int

const (
	stepDone  step = iota // covered: acknowledge after the poison check
	stepWait              // a fresh lead: wait for its sync to finish
	stepLead              // no fresh lead: claim it and sync
	stepAlone             // waited long enough: sync without claiming
)

func (s step) String() string {
	return [...]string{"done", "wait", "lead", "alone"}[s]
}

// decide is one round of the group sync (package doc): given the page's
// words, the frames [lo, end), the time now, when this process began
// waiting and its wait bound (all in ns), it returns the next step and, for
// stepWait, how long to wait at most.
func decide(synced, from, lo, end LSN, lead, now, since, bound int64) (step, time.Duration) {
	if covered(synced, from, lo, end) {
		return stepDone, 0
	}
	age := now - lead
	if lead == 0 || age >= bound || age <= -bound {
		return stepLead, 0 // none, expired, or from another boot or clock
	}
	if now-since >= 2*bound {
		return stepAlone, 0
	}
	return stepWait, time.Duration(min(bound-age, bound, 2*bound-(now-since)))
}

// waitBound is how long a fresh lead may make this process wait (ns).
func (l *Log) waitBound() int64 {
	return min(max(leadFactor*l.syncNanos.Load(), int64(minLeadWait)), int64(maxLeadWait))
}

// observe folds one fdatasync's duration into the mean (1/8 weight).
func (l *Log) observe(d time.Duration) {
	for {
		old := l.syncNanos.Load()
		nw := old + (int64(d)-old)/8
		if old == 0 {
			nw = int64(d)
		}
		if l.syncNanos.CompareAndSwap(old, nw) {
			return
		}
	}
}

// groupSync makes this process's frames [lo, end) of segment s durable:
// by another process's sync, by waiting for the leading one, or by its own
// (package doc).
func (l *Log) groupSync(g *group, s *segment, lo, end LSN) error {
	bound := l.waitBound()
	// How long this process has waited is measured on the monotonic clock:
	// a step of the wall clock (which lead needs, to compare claims across
	// processes) must not stretch the wait bound.
	start := time.Now()
	for {
		done := g.w.Load(wDone)
		synced := LSN(g.w.Load(wSynced))
		from := LSN(g.w.Load(wFrom)) // after synced: its publisher raised from first
		lead := g.w.Load(wLead)
		now := l.now()
		since := now - int64(time.Since(start))
		st, d := decide(synced, from, lo, end, int64(lead), now, since, bound)
		switch st {
		case stepDone:
			l.covered.Add(1)
			return l.CheckShared()
		case stepWait:
			g.w.Wait(wDone, done, d)
		case stepLead:
			me := uint64(now)
			if me == lead || me == 0 {
				me++
			}
			if !g.w.CompareAndSwap(wLead, lead, me) {
				if !g.live() {
					return l.syncSegment(nil, s)
				}
				continue // another process claimed it first: look again
			}
			// Stopped or killed here (crash-point sweep, stall test), this
			// process holds the lead until the bound expires.
			failpoint.Hit("wal.sync_lead")
			err := l.syncSegment(g, s)
			g.w.CompareAndSwap(wLead, me, 0) // unless another process took it over
			g.finish()
			return err
		case stepAlone:
			err := l.syncSegment(g, s)
			g.finish()
			return err
		}
	}
}

// syncSegment fdatasyncs s, then checks the poison mark. With the page g it
// first raises from to where this process opened s and notes how far s is
// written (writtenThrough), and publishes that as synced once both
// succeeded.
func (l *Log) syncSegment(g *group, s *segment) error {
	mark := LSN(0)
	if g != nil {
		g.raise(wFrom, uint64(MakeLSN(s.id, s.from)))
		switch w := g.writtenThrough(); {
		case w.Segment() == s.id:
			mark = w
		case w.Segment() > s.id:
			mark = MakeLSN(s.id, ^uint32(0)) // the tail left s: all of it is written
		}
	}
	t := time.Now()
	err := vfs.Datasync(s.f)
	l.observe(time.Since(t))
	l.syncs.Add(1)
	if err != nil {
		return l.poison(fmt.Errorf("sync segment %d: %w", s.id, err))
	}
	if err := l.otherPoisoned(); err != nil {
		return err
	}
	if mark != 0 {
		g.raise(wSynced, uint64(mark))
	}
	return nil
}
