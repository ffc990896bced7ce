// Package bench holds durofs's benchmark harness and the SQLite reference
// provider it compares against. It is its own Go module so that the library's
// go.mod stays lean: only benchmarks depend on SQLite.
package bench
