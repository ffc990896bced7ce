//go:build linux

package provider

import "golang.org/x/sys/unix"

// Magic numbers of network file systems (statfs(2) f_type).
var networkFSMagic = map[int64]string{
	0x6969:     "nfs",
	0xFF534D42: "cifs",
	0xFE534D42: "smb2",
	0x517B:     "smb",
	0x65735546: "fuse", // sshfs and other FUSE mounts are often remote; refuse unless allowed
	0x564C:     "ncp",
	0x5346414F: "afs",
}

// networkFS reports the name of the network file system dir is on, if any.
func networkFS(dir string) (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "", err
	}
	return networkFSMagic[int64(st.Type)], nil
}
