package vfs

import "testing"

func TestKernelAtLeast(t *testing.T) {
	for _, c := range []struct {
		release string
		want    bool
	}{
		{"5.8.0", true}, {"5.7.19", false}, {"6.18.44-fc-v769", true}, {"4.19.0-amd64", false},
		{"5.10", true}, {"garbage", false}, {"", false},
	} {
		if got := kernelAtLeast(c.release, 5, 8); got != c.want {
			t.Errorf("kernelAtLeast(%q, 5, 8) = %v, want %v", c.release, got, c.want)
		}
	}
}

func TestOSBarrier(t *testing.T) {
	id, err := BootID(OS{})
	if err != nil {
		t.Skipf("no barrier on this kernel: %v", err)
	}
	if again, _ := BootID(OS{}); again != id || len(id) < 16 {
		t.Fatalf("boot id %q then %q", id, again)
	}
	if err := SyncFS(OS{}, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := SyncFS(OS{}, "/nonexistent/durofs"); err == nil {
		t.Fatal("SyncFS of a missing directory succeeded")
	}
	c := Counting(NoSync(OS{}))
	if err := SyncFS(c, t.TempDir()); err != nil || c.Counts().FSSyncs != 1 {
		t.Fatalf("counting barrier: %v, %+v", err, c.Counts())
	}
}
