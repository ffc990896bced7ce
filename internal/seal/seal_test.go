package seal

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func mustSeal(t *testing.T, id, obj string) []byte {
	t.Helper()
	b, err := Seal(id, []byte(obj))
	if err != nil {
		t.Fatalf("Seal(%q): %v", obj, err)
	}
	return b
}

// flipDigit changes the first hex digit of a sealed file's checksum.
func flipDigit(b []byte) []byte {
	out := append([]byte{}, b...)
	i := strings.Index(string(out), `"crc32c":"`) + len(`"crc32c":"`)
	if out[i] == '0' {
		out[i] = '1'
	} else {
		out[i] = '0'
	}
	return out
}

func TestSealOpen(t *testing.T) {
	const id = "instances/a/instance.json"
	v1 := mustSeal(t, id, `{"status":"Running","output":"x"}`)
	v2 := mustSeal(t, id, `{"status":"Complet","output":"y"}`)
	other := mustSeal(t, "instances/b/instance.json", `{"status":"Running","output":"x"}`)
	// a reader that saw the first half of v1 and the second half of v2
	mixed := append(append([]byte{}, v1[:len(v1)/2]...), v2[len(v2)/2:]...)
	tests := []struct {
		name       string
		id         string
		data       []byte
		want       string
		wantSealed bool
		wantErr    error
	}{
		{"round trip", id, v1, `{"status":"Running","output":"x"}`, true, nil},
		{"empty object", id, mustSeal(t, id, `{}`), `{}`, true, nil},
		{"trailing spaces (padding)", id, append(append([]byte{}, v1...), "   \n"...), `{"status":"Running","output":"x"}`, true, nil},
		{"another file's content", id, other, "", true, ErrMismatch},
		{"two versions mixed", id, mixed, "", true, ErrMismatch},
		{"one byte changed", id, []byte(strings.Replace(string(v1), "Running", "Runnimg", 1)), "", true, ErrMismatch},
		{"checksum changed", id, flipDigit(v1), "", true, ErrMismatch},
		{"unsealed", id, []byte(`{"status":"Running"}`), `{"status":"Running"}`, false, nil},
		{"unsealed with a crc32c member that is not hex", id, []byte(`{"crc32c":"zzzzzzzz"}`), `{"crc32c":"zzzzzzzz"}`, false, nil},
		{"prefix of a sealed file", id, v1[:len(v1)-6], string(v1[:len(v1)-6]), false, nil},
		{"empty", id, nil, "", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, sealed, err := Open(tt.id, tt.data)
			if !errors.Is(err, tt.wantErr) || sealed != tt.wantSealed {
				t.Fatalf("Open = (%q, %v, %v), want sealed %v, err %v", got, sealed, err, tt.wantSealed, tt.wantErr)
			}
			if err == nil && string(got) != tt.want {
				t.Fatalf("Open = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSealedFileIsOneJSONObject(t *testing.T) {
	b := mustSeal(t, "x", `{"a":1,"b":[1,2]}`)
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("sealed file is not JSON: %v\n%s", err, b)
	}
	if len(v) != 3 || v[Member] == nil {
		t.Fatalf("sealed object = %v, want a, b and %s", v, Member)
	}
}

func TestSealRejectsNonObjects(t *testing.T) {
	for _, in := range []string{``, `[]`, `"x"`, `{"a":1}` + "\n", ` {"a":1}`, `{"crc32c":"00000000"}`, `{ }`, `{"a":1 }`} {
		if _, err := Seal("x", []byte(in)); err == nil {
			t.Errorf("Seal(%q) succeeded, want an error", in)
		}
	}
}

// FuzzOpen: Open never panics, and whatever it accepts as sealed for an id
// is exactly what Seal produced for that id (a torn or foreign file is
// never accepted as sealed).
func FuzzOpen(f *testing.F) {
	f.Add("instances/a/instance.json", []byte(`{"status":"Running"}`), 10)
	f.Add("commits/a.json", []byte(`{}`), 3)
	f.Fuzz(func(t *testing.T, id string, obj []byte, cut int) {
		if !json.Valid(obj) {
			return
		}
		sealed, err := Seal(id, obj)
		if err != nil {
			return
		}
		got, ok, err := Open(id, sealed)
		if err != nil || !ok || string(got) != string(obj) {
			t.Fatalf("Open(Seal(%q)) = (%q, %v, %v)", obj, got, ok, err)
		}
		if cut < 0 {
			cut = -cut
		}
		torn := sealed[:cut%(len(sealed)-1)] // cuts at least the closing brace
		if got, ok, err := Open(id, torn); ok && err == nil {
			t.Fatalf("torn prefix %q accepted as sealed: %q", torn, got)
		}
		if _, ok, err := Open(id+"x", sealed); ok && err == nil {
			t.Fatalf("seal for %q accepted for %q", id, id+"x")
		}
	})
}
