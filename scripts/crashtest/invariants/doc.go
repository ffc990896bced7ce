// Package invariants checks a durofs directory at quiescence against the
// crash suite's invariants (design.md §6) and an oracle of what the workers
// were told (package oracle), and counts violations per invariant:
//
//  1. No lost committed turn: every ack that returned OK is in the history
//     with the same event ids and the same event bytes.
//  2. No partial or phantom turn: an ack that failed or never returned left
//     none or all of its events; every history event was written by a
//     reported ack (with a complete oracle); a killed worker left at most
//     one committed but unreported turn per dispatcher.
//  3. Histories well formed: every record passes its CRC, no torn tail is
//     left after recovery, event ids are contiguous from 1 and unique, every
//     payload is an event with the record's id, state.json and
//     instance.json agree with the histories, nothing was quarantined.
//  4. Each consumed message is reflected in at most one committed turn: an
//     execution starts once, every completion (activity, timer,
//     sub-orchestration) appears once per scheduling event, an external
//     event at most as often as it was raised.
//  5. Quiescence: no lease or claim marks a commit pending (neither a
//     record of the write-ahead log, committed but never applied in full,
//     nor one that never committed), no staged message, temporary file,
//     claim or held lease remains, and the queues hold only timers not yet
//     due. A deleted instance (Input.Deleted) left nothing: no directory,
//     no message or timer for it; no deletion marker remains.
//  6. Every started instance not deleted (and every sub-orchestration)
//     reached its expected terminal status and output (and workload.Verify
//     agrees, when a provider is given).
//  7. Fences never decrease: record epochs per instance in file and
//     execution order, instance.json and lease.json at least as high; with
//     the oracle also: a stale holder's ack (rejected, or held back while
//     its worker was stopped past its lease) is never accepted and leaves no
//     trace, one turn carries one fence, no two turns share one.
//
// The checker reads files directly and never opens a provider on the
// directory itself (that would run recovery and repair what it should
// find). Callers that want workload.Verify as well open the provider after
// their final recovery and pass it in.
package invariants
