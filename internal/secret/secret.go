package secret

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/tink-crypto/tink-go/v2/aead"
	"github.com/tink-crypto/tink-go/v2/insecurecleartextkeyset"
	"github.com/tink-crypto/tink-go/v2/keyset"
	"github.com/tink-crypto/tink-go/v2/tink"
)

// ErrOpen is the category of every failure to open a ciphertext: wrong
// associated data, tampering, or a key the keyset does not hold.
var ErrOpen = errors.New("cannot open sealed secret")

// Sealer seals and opens secrets with one AEAD keyset. It is safe for
// concurrent use.
type Sealer struct {
	aead tink.AEAD
	keys []KeyInfo
}

// NewEphemeral returns a Sealer over a fresh in-memory AES256-GCM key, for
// tests and development: what it seals cannot be opened after a restart.
func NewEphemeral() (*Sealer, error) {
	h, err := keyset.NewHandle(aead.AES256GCMKeyTemplate())
	if err != nil {
		return nil, fmt.Errorf("new ephemeral sealer: %w", err)
	}
	return newSealer(h, "new ephemeral sealer")
}

// Load reads the keyset file at path; a missing file is an error wrapping
// fs.ErrNotExist (replicas sharing a database must share one key: create it
// once with LoadOrCreate and copy it).
func Load(path string) (*Sealer, error) {
	h, err := loadKeyset(path)
	if err != nil {
		return nil, err
	}
	return newSealer(h, "load keyset "+path)
}

// LoadOrCreate reads the JSON keyset at path, or creates one (a single
// AES256-GCM key) with mode 0600 when the file does not exist. The file is
// the root secret: one readable by group or others is refused.
func LoadOrCreate(path string) (*Sealer, error) {
	h, err := loadKeyset(path)
	if errors.Is(err, fs.ErrNotExist) {
		h, err = createKeyset(path)
	}
	if err != nil {
		return nil, err
	}
	return newSealer(h, "load keyset "+path)
}

func newSealer(h *keyset.Handle, action string) (*Sealer, error) {
	a, err := aead.New(h)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", action, err)
	}
	return &Sealer{aead: a, keys: keyInfos(h)}, nil
}

// loadKeyset reads an existing keyset file; fs.ErrNotExist (wrapped) when
// there is none.
func loadKeyset(path string) (*keyset.Handle, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load keyset %s: %w", path, err)
	}
	defer f.Close()
	return readKeyset(f, path)
}

// readKeyset reads the keyset file f opened at path: a regular file that
// only its owner can read or write.
func readKeyset(f *os.File, path string) (*keyset.Handle, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("load keyset %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("load keyset %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("load keyset %s: mode %04o lets group or others read the key; chmod 600 it", path, perm)
	}
	h, err := insecurecleartextkeyset.Read(keyset.NewJSONReader(f))
	if err != nil {
		return nil, fmt.Errorf("load keyset %s: %w", path, err)
	}
	return h, nil
}

// createKeyset writes a new keyset to a 0600 temporary file next to path and
// links it into place, so a crash never leaves a partial keyset and two
// processes creating it at once agree on one (the loser reads the winner's).
func createKeyset(path string) (*keyset.Handle, error) {
	h, err := keyset.NewHandle(aead.AES256GCMKeyTemplate())
	if err != nil {
		return nil, fmt.Errorf("create keyset %s: %w", path, err)
	}
	var buf bytes.Buffer
	if err := insecurecleartextkeyset.Write(h, keyset.NewJSONWriter(&buf)); err != nil {
		return nil, fmt.Errorf("create keyset %s: %w", path, err)
	}
	if err := writeNew(path, buf.Bytes()); errors.Is(err, fs.ErrExist) {
		return loadKeyset(path)
	} else if err != nil {
		return nil, fmt.Errorf("create keyset %s: %w", path, err)
	}
	return h, nil
}

// writeNew writes data to a synced 0600 temporary file in path's directory
// and hard-links it to path; fs.ErrExist if path appeared meanwhile.
func writeNew(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := writeTemp(dir, filepath.Base(path), data)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	// Link, not rename: rename would replace a keyset another process
	// created since we looked, orphaning whatever it already sealed.
	if err := os.Link(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

// writeTemp writes data to a new synced 0600 file in dir named after base
// and returns its path.
func writeTemp(dir, base string, data []byte) (string, error) {
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return "", err
	}
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return tmp.Name(), nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Seal encrypts plaintext bound to associated (the owning row's id, say):
// Open needs the same associated data.
func (s *Sealer) Seal(plaintext, associated []byte) ([]byte, error) {
	ct, err := s.aead.Encrypt(plaintext, associated)
	if err != nil {
		return nil, fmt.Errorf("seal secret: %w", err)
	}
	return ct, nil
}

// Open decrypts what Seal returned for the same associated data; any
// mismatch or tampering is ErrOpen.
func (s *Sealer) Open(ciphertext, associated []byte) ([]byte, error) {
	pt, err := s.aead.Decrypt(ciphertext, associated)
	if err != nil {
		return nil, fmt.Errorf("open secret: %w: %v", ErrOpen, err)
	}
	return pt, nil
}
