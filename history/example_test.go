package history_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/internal/vfs"
)

func ExampleLog() {
	dir, err := os.MkdirTemp("", "history-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	log := history.Open(vfs.OS{}, filepath.Join(dir, "executions", "1", "history.jsonl"))
	batch := []history.Record{
		{ID: 1, Epoch: 1, Payload: []byte(`{"kind":"OrchestrationStarted"}`)},
		{ID: 2, Epoch: 1, Payload: []byte(`{"kind":"ActivityScheduled"}`)},
	}
	if err := log.Append(batch); err != nil {
		fmt.Println(err)
		return
	}
	// Redoing a committed append is a no-op.
	n, err := log.AppendAt(0, batch)
	fmt.Println("redo appended", n, err)
	// Appending an id that is already there is refused.
	err = log.Append(batch[1:])
	fmt.Println(err != nil)

	s, err := log.Read()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range s.Records {
		fmt.Printf("%d %d %s\n", r.ID, r.Epoch, r.Payload)
	}
	line, _ := history.EncodeRecord(batch[0])
	fmt.Printf("%s", line)
	// Output:
	// redo appended 0 <nil>
	// true
	// 1 1 {"kind":"OrchestrationStarted"}
	// 2 1 {"kind":"ActivityScheduled"}
	// 307b7e95 1 1 {"kind":"OrchestrationStarted"}
}
