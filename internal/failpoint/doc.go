// Package failpoint provides named crash points for the crash-recovery suite
// (scripts/crashtest).
//
// Provider code calls [Hit] with a constant name at every step of a
// multi-file operation ("ack.after_commit_record", "redo.after_history",
// "workack.after_claim_commit", ...). What a call does depends on the build.
//
// In normal builds (no build tag) Hit is an empty function. The compiler
// inlines it, so a call and its constant argument compile to nothing:
// failpoints cost nothing in production binaries (go build -gcflags=-m
// reports "inlining call to failpoint.Hit").
//
// In builds with the crashtest tag (go build -tags crashtest), Hit reads
// these environment variables once:
//
//   - DUROFS_FAILPOINT=name or name:nth kills the process with SIGKILL on the
//     nth hit of name (default 1) in this process. No deferred function runs
//     and no buffer is flushed: the process dies as if by kill -9 at that
//     instant.
//   - DUROFS_FAILPOINT_LIST=path appends every name hit, one per line, to the
//     file at path (unbuffered, before a kill), so a test can discover the
//     points a workload reaches and how often.
//   - DUROFS_FAILPOINT_STOP=prefixes (Unix) stops the process with SIGSTOP
//     at the first hit of a name with one of the comma-separated prefixes
//     within a second of each SIGUSR2 it receives, reporting the name to
//     the file DUROFS_FAILPOINT_STOP_LOG names: the stall test stops a
//     process inside its commits, holding their locks.
//
// Names are lower case and dot-separated, "<operation>.<step>". A name hit
// several times by one operation (once per published message, say) is one
// failpoint; nth selects the occurrence.
package failpoint
