package durable

import (
	"os"
	"path/filepath"
)

// WriteFileAtomic replaces dir/name with data atomically and durably: it
// writes and fsyncs name.tmp (0600), renames it over name and fsyncs dir.
func WriteFileAtomic(dir, name string, data []byte) error {
	p := filepath.Join(dir, name)
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err == nil {
		err = SyncDir(dir)
	}
	return err
}

// SyncDir fsyncs a directory, so the entries made in it survive a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
