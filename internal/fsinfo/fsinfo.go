// Package fsinfo tells what kind of file system a directory is on, where
// that changes what durofs costs or guarantees.
package fsinfo
