package provider

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/durofs/durofs/internal/vfs"
)

// scanCountFS counts listings of one directory.
type scanCountFS struct {
	vfs.FS
	dir   string
	scans atomic.Int64
}

func (s *scanCountFS) ReadDirNames(name string) ([]string, error) {
	if name == s.dir {
		s.scans.Add(1)
	}
	return s.FS.ReadDirNames(name)
}

// TestDeleteInstanceBulkBatches: a bulk deletion lists the instances once,
// to choose (the trees and each batch's orphan check read the children
// index, not every instance), commits one record per batch of
// bulkDeleteBatch instances, and deletes every candidate.
func TestDeleteInstanceBulkBatches(t *testing.T) {
	for _, n := range []int{1, bulkDeleteBatch, bulkDeleteBatch + 1, 2*bulkDeleteBatch + 10} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			dir := t.TempDir()
			sfs := &scanCountFS{FS: vfs.NoFollow(dir, vfs.Perm{}), dir: filepath.Join(dir, "instances")}
			p := openT(t, dir, Options{fs: sfs, Durability: ProcessCrashSafe, SweepInterval: -1})
			for i := range n {
				completeForFsck(t, p, fmt.Sprintf("bulk-%03d", i))
			}
			sfs.scans.Store(0)
			appends := p.LogStats().Appends
			res, err := p.DeleteInstanceBulk(context.Background(), InstanceFilter{})
			mustNoErr(t, err)
			if res.InstancesDeleted != uint64(n) {
				t.Errorf("deleted %d instances, want %d", res.InstancesDeleted, n)
			}
			if got := sfs.scans.Load(); got != 1 {
				t.Errorf("instances listed %d times, want once", got)
			}
			batches := (n + bulkDeleteBatch - 1) / bulkDeleteBatch
			if got := p.LogStats().Appends - appends; got != int64(batches) {
				t.Errorf("%d log records, want %d (one per batch)", got, batches)
			}
			left, err := p.ListInstances(context.Background())
			mustNoErr(t, err)
			if len(left) != 0 {
				t.Errorf("%d instances left: %v", len(left), left)
			}
		})
	}
}
