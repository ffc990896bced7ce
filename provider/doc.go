// Package provider is the duroxide Provider contract in Go, and its filesystem
// implementation.
//
// The contract (a port of duroxide's src/providers/mod.rs) is the [Provider]
// interface, the optional [Admin] capability, and the data they exchange:
// [WorkItem] queue payloads, history [Event]s, [ExecutionMetadata],
// [OrchestrationItem] and the management types. WorkItem and Event marshal to
// exactly duroxide's serde JSON, so a durofs directory can be read by any tool
// that speaks duroxide's format, and events of types this version does not
// know are stored and returned byte for byte.
//
// Errors are [*ProviderError] values; [IsRetryable] tells a runtime whether to
// retry. Contract failures (an invalid or expired lock token, a duplicate
// event, a missing instance) are permanent.
//
// # The filesystem provider
//
// [Open] returns an [FSProvider] on a directory that several processes may
// share. Its on-disk format (FORMAT version 1):
//
//	FORMAT                                 {"format":"durofs","version":1}
//	instances/<key>/lock                   the instance's flock file, never deleted
//	instances/<key>/lease.json             lease (token, owner, fence, expiry) + orchestrator queue state
//	instances/<key>/instance.json          current execution, last fence, instance record, counters
//	instances/<key>/executions/<n>/history.jsonl   package history records, one event each
//	instances/<key>/executions/<n>/state.json      execution status, output, pin, timestamps
//	queues/orchestrator/, queues/worker/   package fsqueue queues (worker items carry claims)
//	commits/<key>.json                     an instance's last commit record (until cleaned; fs_barrier.go)
//	commits/~del-<uuid>.json               a pending deletion group
//	sessions/<key>.json                    session ownership leases
//	quarantine/                            unusable files, with a .reason file each
//
// Every multi-file change (ack, work-item ack, prune, delete, append) is a
// commit: validate under the instance flock, write one durable commit record
// (the commit point), then apply idempotent steps and delete the record.
// fs_commit.go states, for every step, what a kill -9 or a power loss right
// after it leaves behind and why recovery (whoever next takes the instance's
// flock, or the background sweep) is correct. Leases are written atomically
// but not fsynced: after a power loss every holder is gone, and the next
// fence is derived from the durable instance.json so fences never go back.
package provider
