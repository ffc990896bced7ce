package fsqueue

import (
	"container/list"
	"sync"
)

// lru is a least-recently-used cache bounded in entries and in bytes (as
// its size function counts them). Not safe for concurrent use.
type lru[K comparable, V any] struct {
	maxItems, maxBytes int
	size               func(V) int

	items map[K]*list.Element
	order list.List // of *lruItem[K, V], most recent first
	bytes int
}

type lruItem[K comparable, V any] struct {
	key  K
	val  V
	size int
}

func (c *lru[K, V]) get(key K) (v V, ok bool) {
	el, ok := c.items[key]
	if !ok {
		return v, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*lruItem[K, V]).val, true
}

// put stores key, evicting the least recently used entries beyond the
// bounds; a value larger than maxBytes on its own is not stored.
func (c *lru[K, V]) put(key K, v V) {
	c.remove(key)
	n := 0
	if c.size != nil {
		n = c.size(v)
	}
	if n > c.maxBytes && c.maxBytes > 0 {
		return
	}
	if c.items == nil {
		c.items = map[K]*list.Element{}
	}
	c.items[key] = c.order.PushFront(&lruItem[K, V]{key: key, val: v, size: n})
	c.bytes += n
	for c.order.Len() > c.maxItems || (c.maxBytes > 0 && c.bytes > c.maxBytes) {
		c.remove(c.order.Back().Value.(*lruItem[K, V]).key)
	}
}

func (c *lru[K, V]) remove(key K) {
	el, ok := c.items[key]
	if !ok {
		return
	}
	it := c.order.Remove(el).(*lruItem[K, V])
	delete(c.items, key)
	c.bytes -= it.size
}

func (c *lru[K, V]) len() int { return c.order.Len() }

func (c *lru[K, V]) reset() {
	c.items = nil
	c.order.Init()
	c.bytes = 0
}

// Bounds of the message cache: parsed messages read by Get and Header
// (message files are immutable, so a cached one is the file), and files
// found damaged (not re-read on every walk that meets them). A fetch reads
// the bodies of the batch it returns and of the candidates it must inspect;
// those it meets again soon are served from here.
const (
	msgCacheItems = 1024
	msgCacheBytes = 4 << 20
)

// msgCache is the message cache (see msgCacheItems), keyed by what a
// message's name says (no name is formatted or parsed on a hit).
type msgCache struct {
	mu  sync.Mutex
	lru lru[Entry, cachedMsg]
}

type cachedMsg struct {
	m   Message
	err error // the file's damage (wraps ErrCorrupt), or nil
}

func msgSize(c cachedMsg) int {
	n := 64 + len(c.m.Name) + len(c.m.Payload)
	for k, v := range c.m.Attrs {
		n += 32 + len(k) + len(v)
	}
	return n
}

func (c *msgCache) get(e Entry) (Message, error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.lru.get(e)
	return v.m, v.err, ok
}

func (c *msgCache) put(e Entry, m Message, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lru.maxItems == 0 {
		c.lru = lru[Entry, cachedMsg]{maxItems: msgCacheItems, maxBytes: msgCacheBytes, size: msgSize}
	}
	c.lru.put(e, cachedMsg{m: m, err: err})
}

func (c *msgCache) drop(e Entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.remove(e)
}

// damaged reports whether e is cached as a file that does not decode.
func (c *msgCache) damaged(e Entry) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.lru.get(e)
	return ok && v.err != nil
}
