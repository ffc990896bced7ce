package harness

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/durofs/durofs/internal/jsonseal"
)

// cloneInstances makes n copies of the completed durofs instance whose
// directory is instances/<template> in dir, named by name(i), i in [0, n):
// every file is copied with the template's id replaced by the copy's (same
// length, so no size changes), each history line's CRC-32C recomputed and
// the seals of instance.json and state.json too.
// It writes what the provider's applies would have written for such an
// instance, without a runtime, so that a store of a million completed
// instances takes minutes to build, not hours. Files are not synced (the
// caller flushes once). workers copies run in parallel.
func cloneInstances(dir, template string, n int, name func(int) string, workers int) error {
	src := filepath.Join(dir, "instances", template)
	type file struct {
		rel  string
		data []byte
	}
	var files []file
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		files = append(files, file{rel, data})
		return nil
	})
	if err != nil {
		return fmt.Errorf("clone: read template %s: %w", template, err)
	}
	old := []byte(template)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				id := name(i)
				if len(id) != len(template) {
					errs <- fmt.Errorf("clone: id %q is not as long as the template's %q", id, template)
					return
				}
				for _, f := range files {
					data := bytes.ReplaceAll(f.data, old, []byte(id))
					switch filepath.Base(f.rel) {
					case "history.jsonl":
						data = recrcHistory(data)
					case "instance.json", "state.json":
						data = jsonseal.Reseal(data)
					}
					path := filepath.Join(dir, "instances", id, f.rel)
					if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
						errs <- err
						return
					}
					if err := os.WriteFile(path, data, 0o600); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// recrcHistory recomputes the CRC-32C field of every line of a history file
// ("<crc> <id> <epoch> <payload>": the CRC covers everything after the first
// space; history package doc).
func recrcHistory(data []byte) []byte {
	tab := crc32.MakeTable(crc32.Castagnoli)
	var out []byte
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		body := bytes.TrimSuffix(line, []byte("\n"))
		sp := bytes.IndexByte(body, ' ')
		if sp < 0 {
			out = append(out, line...)
			continue
		}
		out = fmt.Appendf(out, "%08x%s\n", crc32.Checksum(body[sp+1:], tab), body[sp:])
	}
	return out
}
