// Package harness is durofs's benchmark harness: the code behind
// `make bench` (cmd/durobench).
//
// It measures, on this machine and side by side with the SQLite reference
// provider (package sqliteref, WAL + synchronous=FULL), the figures of
// design.md §7:
//
//   - fsyncs: file and directory fsyncs per durable orchestration ack and
//     per work-item ack on the happy path, counted exactly through
//     durofs's internal FS layer (vfs.Counting) while a single-process
//     workload runs with every provider call serialised, so each sync is
//     attributed to the call that made it;
//   - throughput: durable orchestration turns per second (and activities
//     per second) of a chain workload and a fan-out/fan-in workload run by
//     1, 2 and 4 separate OS processes sharing one durofs directory or one
//     SQLite file, median of several runs, every run verified with
//     workload.Verify;
//   - fetch latency: FetchOrchestrationItem with 100, 10,000 and 100,000
//     queued messages, all visible or nearly all delayed;
//   - restart: time from starting a fresh process after a kill -9 to its
//     first fetched item, with 10,000 instances of which 1,000 have pending
//     work (and, for comparison, with only the 1,000 pending ones);
//   - peak RSS of every child process.
//
// Benchmark processes are re-executions of the harness's own binary (see
// ChildMain), so several processes really are separate OS processes.
// Nothing here asserts a time: targets are reported as PASS or MISS, and
// Run fails only when a section cannot run or a workload's result is wrong.
package harness
