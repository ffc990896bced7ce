package provider

import "github.com/durofs/durofs/internal/fsinfo"

// ext4Journal is fsinfo.Ext4Journal (a variable for tests).
var ext4Journal = fsinfo.Ext4Journal

// warnNoJournal logs a warning if the directory is on ext4 without a
// journal (Open calls it when the background sweep is on): there every file
// creation scans the inodes its block group freed in the last minutes
// (fsinfo.Ext4Journal), and durofs creates and removes about three files
// per activity, so its throughput falls as deletions accumulate
// (BENCHMARKS.md, 2026-11-28).
func (p *FSProvider) warnNoJournal() {
	if journal, ok := ext4Journal(p.dir); ok && !journal {
		p.log.Warn("durofs: the directory is on ext4 without a journal, where creating a file gets slower with every file removed in the last minutes; durofs reuses the files of consumed messages, but still creates files for new instances and for bursts of messages, so throughput may fall as work goes on (mkfs.ext4 makes a journal by default: see the README)", "dir", p.dir)
	}
}
