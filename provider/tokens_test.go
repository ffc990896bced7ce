package provider

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/durofs/durofs/internal/names"
)

// treeSnapshot describes every entry below dir (directories, lock files and
// empty files included): its path, type, mode, size and, for regular files,
// content - quoted up to 64 KiB, a SHA-256 digest beyond (a log segment is
// 16 MiB preallocated: quoting it twice per call took 0.1 to 0.2 s of each
// of the hundreds of fixtures of the token and UTF-8 tests under -race).
func treeSnapshot(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		info, err := d.Info()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %v %d", rel, info.Mode(), info.Size())
		if info.Mode().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if len(data) <= 64<<10 {
				line += fmt.Sprintf(" %q", data)
			} else {
				line += fmt.Sprintf(" sha256:%x", sha256.Sum256(data))
			}
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// assertTreeUnchanged fails if dir no longer matches before, naming the
// entries that differ.
func assertTreeUnchanged(t *testing.T, dir, before, what string) {
	t.Helper()
	after := treeSnapshot(t, dir)
	if after == before {
		return
	}
	was := map[string]bool{}
	for _, l := range strings.Split(before, "\n") {
		was[l] = true
	}
	now := map[string]bool{}
	for _, l := range strings.Split(after, "\n") {
		now[l] = true
		if !was[l] {
			t.Errorf("%s changed the directory: + %s", what, l)
		}
	}
	for l := range was {
		if !now[l] {
			t.Errorf("%s changed the directory: - %s", what, l)
		}
	}
}

// tokenFixture is a provider holding one orchestration lock (instance
// "real") and one work-item claim, with no background sweep (nothing
// changes the directory but the calls under test).
type tokenFixture struct {
	p         *FSProvider
	dir       string
	orchToken string // held
	workToken string // held
}

func newTokenFixture(t *testing.T) tokenFixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	// ProcessCrashSafe: no fsyncs, as these tests make hundreds of fixtures
	// and test validation, not durability. No background sweep or
	// checkpoint: the tests compare the directory before and after one call,
	// and a checkpoint writing wal/checkpoint in between failed one (CI of
	// 8f9eca2).
	p := openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1, Durability: ProcessCrashSafe})
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("real"), 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch: %+v %v", it, err)
	}
	mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "real", ExecutionID: 1, ID: 2, Name: "act", Input: "{}"}))
	w, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, TagFilter{})
	if err != nil || w == nil {
		t.Fatalf("fetch work: %+v %v", w, err)
	}
	return tokenFixture{p: p, dir: dir, orchToken: it.LockToken, workToken: w.LockToken}
}

// TestForgedOrchestrationTokens: every orchestration token operation
// refuses a token that does not name a held lock with the permanent
// ErrInvalidLockToken, and creates, changes and removes nothing on disk:
// not for a well-formed token whose key names no instance (which used to
// leave instances/<key>/lock behind), nor for a key that is no valid
// encoding (a NUL byte or a name over 255 bytes used to give a retryable
// EINVAL or ENAMETOOLONG, which a runtime retries forever).
func TestForgedOrchestrationTokens(t *testing.T) {
	u := uuid.NewString()
	cases := []struct {
		name  string
		token func(f tokenFixture) string
	}{
		{"valid key, no instance", func(tokenFixture) string { return "o1." + u + ".nonexistent" }},
		{"key lock, no instance", func(tokenFixture) string { return "o1." + u + ".lock" }},
		{"key of the empty id, no instance", func(tokenFixture) string { return "o1." + u + "." + names.Encode("") }},
		{"hashed key, no instance", func(tokenFixture) string {
			return "o1." + u + "." + names.Encode(strings.Repeat("z", 500))
		}},
		{"key with a NUL byte", func(tokenFixture) string { return "o1." + u + ".a\x00b" }},
		{"key over 255 bytes", func(tokenFixture) string { return "o1." + u + "." + strings.Repeat("z", 300) }},
		{"key of 181 bytes (over names.MaxLen)", func(tokenFixture) string { return "o1." + u + "." + strings.Repeat("z", names.MaxLen+1) }},
		{"key not in canonical form (%72 for r)", func(tokenFixture) string { return "o1." + u + ".%72eal" }},
		{"key with upper case", func(tokenFixture) string { return "o1." + u + ".Real" }},
		{"key with a leading dot", func(tokenFixture) string { return "o1." + u + "." + ".hidden" }},
		{"key with a slash", func(tokenFixture) string { return "o1." + u + "." + "../instances/real" }},
		{"key ..", func(tokenFixture) string { return "o1." + u + "." + ".." }},
		{"key with a raw non-ASCII byte", func(tokenFixture) string { return "o1." + u + ".\xff" }},
		{"hashed key with upper-case hex", func(tokenFixture) string { return "o1." + u + ".~" + strings.Repeat("A", 64) }},
		{"lease token not a UUID, no instance", func(tokenFixture) string {
			return "o1." + strings.Repeat("x", 36) + ".nonexistent"
		}},
		{"lease token not a UUID, real instance", func(tokenFixture) string {
			return "o1." + strings.Repeat("x", 36) + ".real"
		}},
		{"lease token upper-cased, real instance", func(f tokenFixture) string {
			return "o1." + strings.ToUpper(f.orchToken[3:39]) + f.orchToken[39:]
		}},
		{"another lease token, real instance", func(tokenFixture) string { return "o1." + u + ".real" }},
		{"nil UUID, real instance", func(tokenFixture) string { return "o1." + uuid.Nil.String() + ".real" }},
		{"held token with a suffix", func(f tokenFixture) string { return f.orchToken + "x" }},
		{"held token without its prefix", func(f tokenFixture) string { return strings.TrimPrefix(f.orchToken, "o1.") }},
		{"a work-item token", func(f tokenFixture) string { return f.workToken }},
		{"empty key", func(tokenFixture) string { return "o1." + u + "." }},
		{"no key", func(tokenFixture) string { return "o1." + u }},
		{"prefix only", func(tokenFixture) string { return "o1." }},
		{"empty", func(tokenFixture) string { return "" }},
		{"invalid-token", func(tokenFixture) string { return "invalid-token" }},
	}
	ops := []struct {
		name string
		call func(p *FSProvider, token string) error
	}{
		{"ack", func(p *FSProvider, token string) error {
			return p.AckOrchestrationItem(context.Background(), token, 1, []Event{started("real")}, nil, nil, md("TestOrch", "1.0.0"), nil)
		}},
		{"abandon", func(p *FSProvider, token string) error {
			return p.AbandonOrchestrationItem(context.Background(), token, 0, false)
		}},
		{"abandon with delay", func(p *FSProvider, token string) error {
			return p.AbandonOrchestrationItem(context.Background(), token, time.Second, true)
		}},
		{"renew", func(p *FSProvider, token string) error {
			return p.RenewOrchestrationItemLock(context.Background(), token, time.Minute)
		}},
	}
	for _, c := range cases {
		for _, o := range ops {
			t.Run(c.name+"/"+o.name, func(t *testing.T) {
				f := newTokenFixture(t) // fresh: one call cannot hide another's leftovers
				token := c.token(f)
				before := treeSnapshot(t, f.dir)
				err := o.call(f.p, token)
				if err == nil || IsRetryable(err) || !errors.Is(err, ErrInvalidLockToken) {
					t.Errorf("%s(%q) = %v (retryable %v); want a permanent ErrInvalidLockToken", o.name, token, err, IsRetryable(err))
				}
				assertTreeUnchanged(t, f.dir, before, fmt.Sprintf("%s(%q)", o.name, token))
				// The held lock is untouched: a fetch finds nothing, and its
				// token still renews it.
				ctx := context.Background()
				if it, err := f.p.FetchOrchestrationItem(ctx, time.Minute, 0, nil); err != nil || it != nil {
					t.Errorf("fetch after %s(%q) = %+v, %v; want nothing (the lock is held)", o.name, token, it, err)
				}
				mustNoErr(t, f.p.RenewOrchestrationItemLock(ctx, f.orchToken, time.Minute))
			})
		}
	}
}

// TestForgedWorkItemTokens: work-item token operations check the whole
// token shape ("w1." + canonical ULID + "." + canonical, non-nil UUID)
// before touching the disk; a malformed token fails with the permanent
// ErrInvalidLockToken, a well-formed one that holds nothing fails
// permanently, and neither changes the directory.
func TestForgedWorkItemTokens(t *testing.T) {
	u := uuid.NewString()
	const ulid = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
	cases := []struct {
		name string
		// wellFormed tokens reach the claim.
		wellFormed bool
		token      func(f tokenFixture) string
	}{
		{"held item, another UUID", true, func(f tokenFixture) string { return f.workToken[:len(f.workToken)-36] + u }},
		{"lower-case ULID", false, func(tokenFixture) string { return "w1." + strings.ToLower(ulid) + "." + u }},
		{"ULID overflowing 48 bits", false, func(tokenFixture) string { return "w1.8" + ulid[1:] + "." + u }},
		{"ULID with a letter Crockford excludes", false, func(tokenFixture) string { return "w1." + ulid[:25] + "U." + u }},
		{"short ULID", false, func(tokenFixture) string { return "w1." + ulid[1:] + "." + u }},
		{"ULID with a NUL byte", false, func(tokenFixture) string { return "w1." + ulid[:25] + "\x00." + u }},
		{"path in place of the ULID", false, func(tokenFixture) string { return "w1.../../lock." + u }},
		{"upper-case UUID", false, func(f tokenFixture) string {
			n := len(f.workToken) - 36
			return f.workToken[:n] + strings.ToUpper(f.workToken[n:])
		}},
		{"nil UUID", false, func(tokenFixture) string { return "w1." + ulid + "." + uuid.Nil.String() }},
		{"UUID not canonical (braces)", false, func(tokenFixture) string { return "w1." + ulid + ".{" + u + "}" }},
		{"UUID of 36 non-hex bytes", false, func(tokenFixture) string { return "w1." + ulid + "." + strings.Repeat("x", 36) }},
		{"held token with a suffix", false, func(f tokenFixture) string { return f.workToken + "x" }},
		{"held token without its prefix", false, func(f tokenFixture) string { return strings.TrimPrefix(f.workToken, "w1.") }},
		{"no UUID", false, func(tokenFixture) string { return "w1." + ulid }},
		{"an orchestration token", false, func(f tokenFixture) string { return f.orchToken }},
		{"prefix only", false, func(tokenFixture) string { return "w1." }},
		{"empty", false, func(tokenFixture) string { return "" }},
		{"invalid-token-123", false, func(tokenFixture) string { return "invalid-token-123" }},
	}
	ops := []struct {
		name string
		call func(p *FSProvider, token string) error
	}{
		{"ack", func(p *FSProvider, token string) error {
			return p.AckWorkItem(context.Background(), token, ActivityCompleted{Instance: "real", ExecutionID: 1, ID: 2, Result: "r"})
		}},
		{"ack without completion", func(p *FSProvider, token string) error {
			return p.AckWorkItem(context.Background(), token, nil)
		}},
		{"abandon", func(p *FSProvider, token string) error {
			return p.AbandonWorkItem(context.Background(), token, time.Second, true)
		}},
		{"renew", func(p *FSProvider, token string) error {
			return p.RenewWorkItemLock(context.Background(), token, time.Minute)
		}},
	}
	for _, c := range cases {
		for _, o := range ops {
			t.Run(c.name+"/"+o.name, func(t *testing.T) {
				f := newTokenFixture(t) // fresh: one call cannot hide another's leftovers
				token := c.token(f)
				before := treeSnapshot(t, f.dir)
				err := o.call(f.p, token)
				if err == nil || IsRetryable(err) || !errors.Is(err, ErrInvalidLockToken) {
					t.Errorf("%s(%q) = %v (retryable %v); want a permanent ErrInvalidLockToken", o.name, token, err, IsRetryable(err))
				}
				assertTreeUnchanged(t, f.dir, before, fmt.Sprintf("%s(%q)", o.name, token))
				// The held claim is untouched: its token still renews it.
				mustNoErr(t, f.p.RenewWorkItemLock(context.Background(), f.workToken, time.Minute))
			})
		}
	}
}

func TestParseOrchToken(t *testing.T) {
	u := uuid.NewString()
	good := []string{"real", "nonexistent", "%", "%FF%FE", "a%00b", names.Encode(strings.Repeat("z", 500)), strings.Repeat("z", names.MaxLen)}
	for _, key := range good {
		tok := orchToken(key, u)
		k, lt, ok := parseOrchToken(tok)
		if !ok || k != key || lt != u {
			t.Errorf("parseOrchToken(%q) = %q, %q, %v; want %q, %q, true", tok, k, lt, ok, key, u)
		}
	}
	bad := []string{
		"o1." + u + ".a\x00b", "o1." + u + "." + strings.Repeat("z", names.MaxLen+1), "o1." + u + ".A",
		"o1." + u + ".%61", "o1." + u + "./", "o1." + u + "..", "o1." + u + ".", "o1." + u + ".~abc",
		"o1." + strings.ToUpper(u) + ".real", "o1." + uuid.Nil.String() + ".real", "o1." + strings.Repeat("-", 36) + ".real",
		"o2." + u + ".real", "o1." + u + "real",
	}
	for _, tok := range bad {
		if k, lt, ok := parseOrchToken(tok); ok {
			t.Errorf("parseOrchToken(%q) = %q, %q, true; want false", tok, k, lt)
		}
	}
}
