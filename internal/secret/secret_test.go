package secret_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/engrams/engrams/internal/secret"
)

func ephemeral(t *testing.T) *secret.Sealer {
	t.Helper()
	s, err := secret.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	s := ephemeral(t)
	cases := []struct {
		name      string
		plaintext []byte
		ad        []byte
	}{
		{"password", []byte(`{"username":"u","password":"p@ss"}`), []byte("cred-1")},
		{"empty plaintext", []byte{}, []byte("cred-2")},
		{"binary", []byte{0, 1, 2, 255, 254}, []byte("cred-3")},
		{"no associated data", []byte("x"), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ct, err := s.Seal(c.plaintext, c.ad)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.plaintext) >= 8 && bytes.Contains(ct, c.plaintext) {
				t.Fatal("ciphertext contains the plaintext")
			}
			pt, err := s.Open(ct, c.ad)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(pt, c.plaintext) {
				t.Fatalf("opened %q, want %q", pt, c.plaintext)
			}
		})
	}
}

func TestOpenRejects(t *testing.T) {
	t.Parallel()
	s := ephemeral(t)
	other := ephemeral(t)
	ct, err := s.Seal([]byte("hunter2"), []byte("cred-1"))
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []byte {
		b := bytes.Clone(ct)
		b[i] ^= 1
		return b
	}
	cases := []struct {
		name   string
		sealer *secret.Sealer
		ct     []byte
		ad     []byte
	}{
		{"other associated data", s, ct, []byte("cred-2")},
		{"missing associated data", s, ct, nil},
		{"tampered body", s, flip(len(ct) / 2), []byte("cred-1")},
		{"tampered tag", s, flip(len(ct) - 1), []byte("cred-1")},
		{"tampered key id", s, flip(1), []byte("cred-1")},
		{"truncated", s, ct[:len(ct)-1], []byte("cred-1")},
		{"empty", s, nil, []byte("cred-1")},
		{"other key", other, ct, []byte("cred-1")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pt, err := c.sealer.Open(c.ct, c.ad)
			if !errors.Is(err, secret.ErrOpen) {
				t.Fatalf("Open = %q, %v; want ErrOpen", pt, err)
			}
		})
	}
}

func TestKeysetFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keyset.json")
	s, err := secret.LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Fatalf("keyset mode = %04o, want 0600", perm)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*")); len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
	ct, err := s.Seal([]byte("hunter2"), []byte("cred-1"))
	if err != nil {
		t.Fatal(err)
	}
	// A second load reads the same key rather than making a new one.
	again, err := secret.LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := again.Open(ct, []byte("cred-1"))
	if err != nil || string(pt) != "hunter2" {
		t.Fatalf("reloaded sealer opened %q, %v", pt, err)
	}
	if _, err := again.Open(ct, []byte("cred-2")); !errors.Is(err, secret.ErrOpen) {
		t.Fatalf("reloaded sealer with other associated data: %v, want ErrOpen", err)
	}
}

func TestKeysetCreatedOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keyset.json")
	const n = 8
	sealers := make([]*secret.Sealer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := secret.LoadOrCreate(path)
			if err != nil {
				t.Error(err)
				return
			}
			sealers[i] = s
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Every concurrent creator ended up with the one key on disk.
	for i, s := range sealers {
		ct, err := s.Seal([]byte("x"), []byte("ad"))
		if err != nil {
			t.Fatal(err)
		}
		for j, o := range sealers {
			if _, err := o.Open(ct, []byte("ad")); err != nil {
				t.Fatalf("sealer %d cannot open what sealer %d sealed: %v", j, i, err)
			}
		}
	}
}

func TestKeysetRefused(t *testing.T) {
	t.Parallel()
	valid := filepath.Join(t.TempDir(), "keyset.json")
	if _, err := secret.LoadOrCreate(valid); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(valid)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		mode    os.FileMode
		content []byte
		wantMsg string
	}{
		{"group readable", 0o640, data, "group or others"},
		{"world readable", 0o604, data, "group or others"},
		{"group writable", 0o620, data, "group or others"},
		{"not a keyset", 0o600, []byte("{not json"), "load keyset"},
		{"empty", 0o600, nil, "load keyset"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "keyset.json")
			if err := os.WriteFile(path, c.content, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, c.mode); err != nil {
				t.Fatal(err)
			}
			s, err := secret.LoadOrCreate(path)
			if err == nil {
				t.Fatalf("LoadOrCreate accepted it (sealer %v)", s)
			}
			if !strings.Contains(err.Error(), c.wantMsg) {
				t.Fatalf("error = %v, want it to mention %q", err, c.wantMsg)
			}
			got, _ := os.ReadFile(path)
			if !bytes.Equal(got, c.content) {
				t.Fatal("a refused keyset file was rewritten")
			}
		})
	}
	if _, err := secret.LoadOrCreate(filepath.Join(t.TempDir(), "missing-dir", "keyset.json")); err == nil {
		t.Fatal("LoadOrCreate created a keyset in a missing directory")
	}
}

func TestLoadNeverCreates(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "keyset.json")
	if _, err := secret.Load(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load of a missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load created %s", p)
	}
	created, err := secret.LoadOrCreate(p)
	if err != nil {
		t.Fatal(err)
	}
	ct, err := created.Seal([]byte("pw"), []byte("row-1"))
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := secret.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if pt, err := loaded.Open(ct, []byte("row-1")); err != nil || string(pt) != "pw" {
		t.Fatalf("Load opens %q, %v", pt, err)
	}
}
