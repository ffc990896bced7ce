package fsqueue

import (
	"testing"

	"github.com/durofs/durofs/internal/vfs"
)

// TestWatchSeesOtherQueuesEnqueue checks the directory watch: a message
// enqueued through one Queue is listed by another at once, every time.
func TestWatchSeesOtherQueuesEnqueue(t *testing.T) {
	dir := t.TempDir()
	q1, err := Open(vfs.OS{}, dir, Options{IndexAttr: "k"})
	if err != nil {
		t.Fatal(err)
	}
	q2, err := Open(vfs.OS{}, dir, Options{IndexAttr: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q2.List(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2000; i++ {
		name, err := q1.Enqueue(Message{Attrs: map[string]string{"k": "v"}, Payload: []byte("{}")})
		if err != nil {
			t.Fatal(err)
		}
		l, err := q2.List()
		if err != nil {
			t.Fatal(err)
		}
		if len(l) != 1 || l[0].Name() != name {
			t.Fatalf("round %d: q2 lists %v, want [%s]", i, l, name)
		}
		if err := q1.Delete(name); err != nil {
			t.Fatal(err)
		}
	}
}
