package secret

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/tink-crypto/tink-go/v2/aead"
	"github.com/tink-crypto/tink-go/v2/insecurecleartextkeyset"
	"github.com/tink-crypto/tink-go/v2/keyset"
)

// KeyInfo describes one key of a keyset, never its material.
type KeyInfo struct {
	ID      uint32 `json:"id"`
	Primary bool   `json:"primary"` // seals everything new
	Status  string `json:"status"`  // ENABLED, DISABLED or DESTROYED
	Type    string `json:"type"`    // the key's type URL
	// Prefix is how ciphertexts name the key: TINK puts 0x01 and the key id
	// in front of each.
	Prefix string `json:"output_prefix"`
}

// tinkPrefix is the first byte of a ciphertext whose key's output prefix is
// TINK; the key id (big-endian) follows.
const tinkPrefix = 0x01

func keyInfos(h *keyset.Handle) []KeyInfo {
	info := h.KeysetInfo()
	out := make([]KeyInfo, 0, len(info.GetKeyInfo()))
	for _, k := range info.GetKeyInfo() {
		out = append(out, KeyInfo{ID: k.GetKeyId(), Primary: k.GetKeyId() == info.GetPrimaryKeyId(),
			Status: k.GetStatus().String(), Type: k.GetTypeUrl(), Prefix: k.GetOutputPrefixType().String()})
	}
	return out
}

// Keys describes the keys of the sealer's keyset, in keyset order.
func (s *Sealer) Keys() []KeyInfo { return slices.Clone(s.keys) }

// PrimaryKeyID is the id of the key Seal uses.
func (s *Sealer) PrimaryKeyID() uint32 {
	for _, k := range s.keys {
		if k.Primary {
			return k.ID
		}
	}
	return 0
}

// UnderPrimary reports whether ciphertext names the primary key in its
// prefix, that is, whether re-sealing it would change nothing.
func (s *Sealer) UnderPrimary(ciphertext []byte) bool {
	id, ok := KeyID(ciphertext)
	return ok && id == s.PrimaryKeyID()
}

// KeyID reads the id of the key a ciphertext was sealed with from its TINK
// prefix; false when it has none.
func KeyID(ciphertext []byte) (uint32, bool) {
	if len(ciphertext) < 5 || ciphertext[0] != tinkPrefix {
		return 0, false
	}
	return binary.BigEndian.Uint32(ciphertext[1:5]), true
}

// Inspect describes the keys of the keyset file at path (checked as Load
// checks it), never their material.
func Inspect(path string) ([]KeyInfo, error) {
	h, err := loadKeyset(path)
	if err != nil {
		return nil, err
	}
	return keyInfos(h), nil
}

// Rotate adds a new AES256-GCM key to the keyset file at path and makes it
// the primary: what is sealed from then on uses it, and the old keys stay,
// so everything sealed before still opens (re-seal it to retire them). The
// file is replaced atomically (a synced 0600 temporary file renamed over
// it) under an exclusive lock, so concurrent rotations each add their key.
// A symlink is followed: its target is replaced. It returns the new key.
func Rotate(path string) (KeyInfo, error) {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	f, err := lockKeyset(path)
	if err != nil {
		return KeyInfo{}, fmt.Errorf("rotate keyset %s: %w", path, err)
	}
	defer f.Close() // releases the lock
	h, err := readKeyset(f, path)
	if err != nil {
		return KeyInfo{}, err
	}
	m := keyset.NewManagerFromHandle(h)
	id, err := m.Add(aead.AES256GCMKeyTemplate())
	if err == nil {
		err = m.SetPrimary(id)
	}
	if err == nil {
		h, err = m.Handle()
	}
	var buf bytes.Buffer
	if err == nil {
		err = insecurecleartextkeyset.Write(h, keyset.NewJSONWriter(&buf))
	}
	if err == nil {
		err = writeReplace(path, buf.Bytes())
	}
	if err != nil {
		return KeyInfo{}, fmt.Errorf("rotate keyset %s: %w", path, err)
	}
	for _, k := range keyInfos(h) {
		if k.ID == id {
			return k, nil
		}
	}
	return KeyInfo{}, fmt.Errorf("rotate keyset %s: the new key %d is missing", path, id)
}

// lockKeyset opens the keyset file at path and takes an exclusive lock on
// it, retrying until the locked file is still the one at path (a rotation
// that held the lock may have renamed a new file over it).
func lockKeyset(path string) (*os.File, error) {
	for range 100 {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, err
		}
		locked, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		now, err := os.Stat(path)
		if err == nil && os.SameFile(locked, now) {
			return f, nil
		}
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return nil, errors.New("the file keeps being replaced")
}

// writeReplace writes data to a synced 0600 temporary file in path's
// directory and renames it over path.
func writeReplace(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := writeTemp(dir, filepath.Base(path), data)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // gone after the rename; cleans up on failure
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}
