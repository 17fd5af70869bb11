package secret_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/engrams/engrams/internal/secret"
)

func newKeyset(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keyset.json")
	if _, err := secret.LoadOrCreate(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func load(t *testing.T, path string) *secret.Sealer {
	t.Helper()
	s, err := secret.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sealedBy(t *testing.T, ct []byte) uint32 {
	t.Helper()
	id, ok := secret.KeyID(ct)
	if !ok {
		t.Fatalf("ciphertext %x has no key id prefix", ct[:min(len(ct), 8)])
	}
	return id
}

// TestRotateKeepsOldCiphertexts: after a rotation the new key seals, the
// old one still opens, and the file stays a private, whole keyset.
func TestRotateKeepsOldCiphertexts(t *testing.T) {
	t.Parallel()
	path := newKeyset(t)
	before := load(t, path)
	old, err := before.Seal([]byte("hunter2"), []byte("row-1"))
	if err != nil {
		t.Fatal(err)
	}
	oldID := before.PrimaryKeyID()
	if got := sealedBy(t, old); got != oldID {
		t.Fatalf("sealed by key %d, the primary is %d", got, oldID)
	}
	k, err := secret.Rotate(path)
	if err != nil {
		t.Fatal(err)
	}
	if !k.Primary || k.ID == oldID || k.Status != "ENABLED" {
		t.Fatalf("rotate returned %+v (old primary %d)", k, oldID)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("keyset after rotate: %v, %v; want mode 0600", fi, err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*")); len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
	after := load(t, path)
	if after.PrimaryKeyID() != k.ID {
		t.Fatalf("primary after rotate = %d, want %d", after.PrimaryKeyID(), k.ID)
	}
	if pt, err := after.Open(old, []byte("row-1")); err != nil || string(pt) != "hunter2" {
		t.Fatalf("old ciphertext after rotate: %q, %v", pt, err)
	}
	if after.UnderPrimary(old) {
		t.Fatal("an old ciphertext counts as under the new primary")
	}
	ct, err := after.Seal([]byte("x"), []byte("row-2"))
	if err != nil {
		t.Fatal(err)
	}
	if sealedBy(t, ct) != k.ID || !after.UnderPrimary(ct) {
		t.Fatalf("a new ciphertext is sealed by key %d, want the new primary %d", sealedBy(t, ct), k.ID)
	}
	// The sealer loaded before the rotation cannot open it: replicas need
	// the rotated file before anything is sealed under the new key.
	if _, err := before.Open(ct, []byte("row-2")); err == nil {
		t.Fatal("a sealer without the new key opened its ciphertext")
	}
	keys, err := secret.Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].ID != oldID || keys[0].Primary || keys[1].ID != k.ID || !keys[1].Primary || keys[1].Prefix != "TINK" {
		t.Fatalf("keys after rotate: %+v", keys)
	}
}

// TestRotateConcurrent: rotations at once each add their key; none is lost.
func TestRotateConcurrent(t *testing.T) {
	t.Parallel()
	path := newKeyset(t)
	const n = 6
	ids := make([]uint32, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			k, err := secret.Rotate(path)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = k.ID
		})
	}
	wg.Wait()
	keys, err := secret.Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != n+1 {
		t.Fatalf("%d keys after %d concurrent rotations, want %d: %+v", len(keys), n, n+1, keys)
	}
	for _, id := range ids {
		if !slices.ContainsFunc(keys, func(k secret.KeyInfo) bool { return k.ID == id }) {
			t.Errorf("rotated key %d is missing", id)
		}
	}
}

// TestRotateFollowsSymlink: a keyset reached through a symlink (as secret
// mounts do) is rotated in its target; the link stays.
func TestRotateFollowsSymlink(t *testing.T) {
	t.Parallel()
	target := newKeyset(t)
	link := filepath.Join(t.TempDir(), "link.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := secret.Rotate(link); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link after rotate: %v, %v", fi, err)
	}
	if keys, err := secret.Inspect(target); err != nil || len(keys) != 2 {
		t.Fatalf("the target after rotate: %+v, %v", keys, err)
	}
}

func TestRotateRefuses(t *testing.T) {
	t.Parallel()
	path := newKeyset(t)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	if _, err := secret.Rotate(path); err == nil || !strings.Contains(err.Error(), "group or others") {
		t.Fatalf("rotate of a readable keyset: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("a refused keyset was rewritten")
	}
	if _, err := secret.Rotate(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("rotate created a keyset")
	}
}

func TestKeyID(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		ct   []byte
		id   uint32
		ok   bool
	}{
		{"tink prefix", []byte{1, 0, 0, 1, 2, 9, 9}, 258, true},
		{"too short", []byte{1, 0, 0, 1}, 0, false},
		{"raw prefix", []byte{0, 0, 0, 1, 2, 9}, 0, false},
		{"empty", nil, 0, false},
	}
	for _, c := range cases {
		if id, ok := secret.KeyID(c.ct); id != c.id || ok != c.ok {
			t.Errorf("%s: KeyID = %d, %v; want %d, %v", c.name, id, ok, c.id, c.ok)
		}
	}
}
