package vfs

import (
	"errors"
	"os"
	"time"
)

// Words is a small array of 64-bit words held in a file that every process
// maps shared (mmap(2) MAP_SHARED): a load, store or compare-and-swap of one
// word is atomic across every process that mapped the same file. The words
// are the file's page cache: they survive a kill -9 of any process, and
// after a power loss the file holds whatever the kernel happened to write
// back (any mix of old and new words, or zeros); nothing syncs them. A
// reader must therefore treat them as hints it can verify, never as a
// durable record.
type Words interface {
	// Len returns the number of words.
	Len() int
	// Load returns word i.
	Load(i int) uint64
	// CompareAndSwap sets word i to new if it holds old, and reports
	// whether it did.
	CompareAndSwap(i int, old, new uint64) bool
	// Wait blocks until word i's low 32 bits may differ from v's, Wake(i)
	// is called by any process, or d has passed; it may return early. It
	// is futex(2)'s wait: no lock is taken, and a process stopped or killed
	// while others wait holds nobody up for longer than d.
	Wait(i int, v uint64, d time.Duration)
	// Wake wakes every process waiting on word i.
	Wake(i int)
	// Close unmaps the words. The file stays open (close it yourself).
	Close() error
}

// ErrNoMap means a file cannot be mapped shared: the FS wraps its files in a
// type that does not unwrap (see [MapWords]), or the system has no shared
// mappings.
var ErrNoMap = errors.New("vfs: file cannot be mapped shared")

// Unwrapper is implemented by File wrappers so that [MapWords] can reach the
// file they wrap.
type Unwrapper interface {
	// Unwrap returns the wrapped file.
	Unwrap() File
}

// WordsMapper is implemented by File wrappers that map words themselves
// ([MapWords] asks them before it unwraps them): a test's simulated process,
// whose mapping must die with it, say.
type WordsMapper interface {
	// MapWords maps the file's first n words, as [MapWords].
	MapWords(n int) (Words, error)
}

// MapWords maps the first n 64-bit words of f, which must be open for
// reading and writing and at least 8n bytes long. It maps a file of [OS]
// or [NoFollow] (mmap; Linux only) or of [MemFS] (in memory, with a power
// loss's effect: the words are the file's unsynced data), through any
// wrapper that implements [WordsMapper] or [Unwrapper]; anything else is
// [ErrNoMap].
func MapWords(f File, n int) (Words, error) {
	for {
		switch t := f.(type) {
		case *memFile:
			return t.mapWords(n)
		case WordsMapper:
			return t.MapWords(n)
		case *os.File:
			return mapOS(t, n)
		case Unwrapper:
			f = t.Unwrap()
		default:
			return nil, ErrNoMap
		}
	}
}

// Unwrap implements Unwrapper.
func (f noSyncFile) Unwrap() File { return f.File }

// Unwrap implements Unwrapper.
func (f countingFile) Unwrap() File { return f.File }
