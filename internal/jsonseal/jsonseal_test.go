package jsonseal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// pad returns data followed by spaces up to n bytes, as a file written in
// place is padded.
func pad(data []byte, n int) []byte {
	return append(bytes.Clone(data), bytes.Repeat([]byte(" "), max(0, n-len(data)))...)
}

// sealPair is two versions of one file as a write in place leaves them on
// disk: sealed, the shorter padded with spaces to the longer's size.
func sealPair(t *testing.T, a, b any) (oldData, newData []byte) {
	t.Helper()
	ab, err := json.Marshal(a)
	must(t, err)
	bb, err := json.Marshal(b)
	must(t, err)
	oldData, newData = pad(Seal(ab), 512), Seal(bb)
	return oldData, pad(newData, len(oldData))
}

// A sealed file reads back as the object it was made of, padded or not; an
// unsealed one is read as it is.
func TestSealRoundTrip(t *testing.T) {
	for _, body := range []string{`{}`, `{"a":1}`, `{"instance":"x","record":{"custom_status":"{\"crc32c\":\"00000000\",\"x\":1}"}}`} {
		sealed := Seal([]byte(body))
		if !bytes.HasPrefix(sealed, []byte(Prefix)) {
			t.Fatalf("Seal(%s) = %s", body, sealed)
		}
		for _, data := range [][]byte{sealed, pad(sealed, 512), append(sealed, '\n')} {
			got, sealedOK, err := Unseal(data)
			if err != nil || !sealedOK || string(got) != body {
				t.Errorf("Unseal(%q) = %s, %v, %v; want %s", data, got, sealedOK, err, body)
			}
		}
	}
	got, sealed, err := Unseal([]byte(`{"instance":"x"}   `))
	if err != nil || sealed || string(got) != `{"instance":"x"}` {
		t.Errorf("unsealed file: %s, %v, %v", got, sealed, err)
	}
}

// Whatever mix of an old and a new version a reader copies - split at any
// byte, or any bytes from either - it either reads exactly one of the two
// or sees that the seal does not match. The versions differ in fields that
// JSON would happily parse from a mix (digits, a string's letters).
func TestSealDetectsEveryMix(t *testing.T) {
	type file struct {
		Instance string `json:"instance"`
		Fence    uint64 `json:"last_fence"`
		Events   uint64 `json:"total_events"`
		Status   string `json:"status"`
	}
	pairs := []struct{ a, b file }{
		{file{"inst", 41, 1299, "Running"}, file{"inst", 42, 1300, "Running"}},
		{file{"inst", 7, 3, "Running"}, file{"inst", 8, 5, "Completed"}},
		{file{"inst", 9, 9, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}, file{"inst", 9, 9, "aaaaaaaaaaaaaaaabbbbbbbbbbbbbbbbbb"}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i, pr := range pairs {
		oldData, newData := sealPair(t, pr.a, pr.b)
		ob, _, err := Unseal(oldData)
		must(t, err)
		nb, _, err := Unseal(newData)
		must(t, err)
		check := func(how string, mix []byte) {
			got, _, err := Unseal(mix)
			if err == nil && !bytes.Equal(got, ob) && !bytes.Equal(got, nb) {
				t.Fatalf("pair %d, %s: a mix passed its seal: %s", i, how, mix)
			}
		}
		for k := range len(oldData) + 1 {
			check(fmt.Sprintf("new up to byte %d", k), append(append([]byte{}, newData[:k]...), oldData[k:]...))
			check(fmt.Sprintf("old up to byte %d", k), append(append([]byte{}, oldData[:k]...), newData[k:]...))
		}
		for n := range 20000 {
			mix := make([]byte, len(oldData))
			for j := range mix {
				if rng.IntN(2) == 0 {
					mix[j] = oldData[j]
				} else {
					mix[j] = newData[j]
				}
			}
			check(fmt.Sprintf("random mix %d", n), mix)
		}
	}
}

// Reseal seals an edited object again, keeping its padding; what is not
// sealed stays as it is.
func TestReseal(t *testing.T) {
	sealed := pad(Seal([]byte(`{"instance":"aaaa","n":1}`)), 512)
	edited := bytes.ReplaceAll(sealed, []byte("aaaa"), []byte("bbbb"))
	if _, _, err := Unseal(edited); err != ErrMismatch {
		t.Fatalf("an edited object passed its old seal: %v", err)
	}
	got := Reseal(edited)
	body, ok, err := Unseal(got)
	if err != nil || !ok || string(body) != `{"instance":"bbbb","n":1}` || len(got) != len(sealed) {
		t.Fatalf("Reseal = %q (%d bytes): %s, %v, %v", got, len(got), body, ok, err)
	}
	for _, plain := range []string{`{"instance":"bbbb"}`, `{"crc32c":"zz`} {
		if got := Reseal([]byte(plain)); string(got) != plain {
			t.Errorf("Reseal(%q) = %q", plain, got)
		}
	}
}
