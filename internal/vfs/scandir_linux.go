package vfs

import (
	"encoding/binary"
	"os"
	"syscall"
)

// scanDirBuf is the size of the getdents(2) buffer: about 500 entries of a
// queue directory per system call.
const scanDirBuf = 32 << 10

// scanDirFile lists an open directory with getdents64(2) into one reused
// buffer, calling fn with each name in place: no allocation per entry.
func scanDirFile(f *os.File, fn func(name []byte) error) error {
	fd := int(f.Fd())
	buf := make([]byte, scanDirBuf)
	for {
		n, err := syscall.Getdents(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "readdirent", Path: f.Name(), Err: err}
		}
		if n <= 0 {
			return nil
		}
		if err := parseDirents(buf[:n], fn); err != nil {
			return err
		}
	}
}

// parseDirents calls fn with the name of each linux_dirent64 record of b
// (d_ino u64, d_off s64, d_reclen u16, d_type u8, d_name NUL-terminated),
// skipping ".", ".." and records with inode 0.
func parseDirents(b []byte, fn func(name []byte) error) error {
	const nameOff = 19
	for len(b) >= nameOff {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < nameOff || reclen > len(b) {
			return &os.PathError{Op: "readdirent", Err: syscall.EIO}
		}
		rec := b[:reclen]
		b = b[reclen:]
		if binary.NativeEndian.Uint64(rec[0:8]) == 0 {
			continue
		}
		name := rec[nameOff:]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		if len(name) == 0 || string(name) == "." || string(name) == ".." {
			continue
		}
		if err := fn(name); err != nil {
			return err
		}
	}
	return nil
}
