package adapter

import (
	"os"
	"path/filepath"
)

// The adapter's durable writes, as the daemon's outbox makes them.

// writeFileAtomic replaces dir/name with data atomically and durably: it
// writes and fsyncs name.tmp (0600), renames it over name and fsyncs dir.
func writeFileAtomic(dir, name string, data []byte) error {
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
		err = syncDir(dir)
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
