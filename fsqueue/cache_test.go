package fsqueue

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// TestLRUBounds: the cache keeps at most maxItems entries and maxBytes,
// evicting the least recently used, and never keeps a value larger than
// maxBytes.
func TestLRUBounds(t *testing.T) {
	c := lru[string, string]{maxItems: 3, maxBytes: 10, size: func(s string) int { return len(s) }}
	for _, k := range []string{"a", "b", "c"} {
		c.put(k, k)
	}
	c.get("a") // b is now the least recently used
	c.put("d", "d")
	if _, ok := c.get("b"); ok || c.len() != 3 {
		t.Fatalf("after a 4th entry: b kept %v, %d entries; want b evicted, 3", ok, c.len())
	}
	c.put("e", "eeeeeeee") // 8 bytes: c goes (4 entries; then 1+1+8 fits)
	if _, ok := c.get("c"); ok || c.len() != 3 || c.bytes != 10 {
		t.Fatalf("after a large entry: c kept %v, %d entries, %d bytes; want c evicted, 3, 10", ok, c.len(), c.bytes)
	}
	c.put("g", "gg") // 12 bytes: the least recently used go until it fits
	if _, ok := c.get("d"); ok || c.bytes > 10 {
		t.Fatalf("after g: d kept %v, %d bytes", ok, c.bytes)
	}
	c.put("f", "ffffffffffff") // larger than maxBytes: not kept
	if _, ok := c.get("f"); ok || c.bytes > 10 {
		t.Fatalf("a value over maxBytes was kept (%d bytes)", c.bytes)
	}
	before := c.len()
	c.remove("g")
	c.remove("missing")
	if c.len() != before-1 {
		t.Fatalf("after removals: %d entries; want %d", c.len(), before-1)
	}
}

// TestCachesBounded: reading and claiming many messages leaves at most
// msgCacheItems parsed messages and claimCacheItems parsed claims cached.
func TestCachesBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes thousands of files")
	}
	q, err := Open(vfs.NoSync(vfs.OS{}), t.TempDir(), Options{Clock: clock.NewManual(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	big := json.RawMessage(`"` + strings.Repeat("x", 8<<10) + `"`)
	n := msgCacheItems + 200
	for i := range n {
		payload := json.RawMessage(strconv.Itoa(i))
		if i%2 == 0 {
			payload = big
		}
		if _, err := q.Enqueue(Message{Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	es, err := q.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if _, err := q.Get(e.Name()); err != nil {
			t.Fatal(err)
		}
	}
	q.msgs.mu.Lock()
	items, bytes := q.msgs.lru.len(), q.msgs.lru.bytes
	q.msgs.mu.Unlock()
	if items > msgCacheItems || bytes > msgCacheBytes {
		t.Fatalf("message cache holds %d messages, %d bytes; want at most %d, %d", items, bytes, msgCacheItems, msgCacheBytes)
	}
	// Claims: claim some, then let ClaimNext's pre-filter read them all.
	defer func(old int) { claimCacheItems = old }(claimCacheItems)
	claimCacheItems = 50
	for range 200 {
		if c, err := q.ClaimNext(context.Background(), "w", time.Minute, nil); err != nil || c == nil {
			t.Fatalf("ClaimNext = %v, %v", c, err)
		}
	}
	q.Invalidate()
	if c, err := q.ClaimNext(context.Background(), "w", time.Minute, func(Entry, *Claim) bool { return false }); err != nil || c != nil {
		t.Fatalf("ClaimNext accepting nothing = %v, %v", c, err)
	}
	q.claims.mu.Lock()
	claims := q.claims.entries.len()
	q.claims.mu.Unlock()
	if claims == 0 || claims > claimCacheItems {
		t.Fatalf("claim cache holds %d claims; want 1..%d", claims, claimCacheItems)
	}
}
