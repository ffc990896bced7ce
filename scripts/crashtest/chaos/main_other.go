//go:build !unix

// Command chaos is durofs's kill -9 crash-recovery suite. It needs SIGKILL,
// SIGSTOP and SIGCONT, so it runs on Unix only.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "chaos: the crash suite needs Unix signals (SIGKILL, SIGSTOP, SIGCONT)")
	os.Exit(2)
}
