package pager

import (
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/engrams/engrams/internal/chunk"
)

// Config says where the file system is mounted.
type Config struct {
	Mount string // an empty directory; a mount a dead agent left there is detached first
}

// Pager is the mounted file system of lazily restored memories. One per
// host agent holds one file per lazily restored machine, as long as the
// snapshot's memory: its chunks come from the chunk store (cache, blob
// store, deltas rebuilt and verified) on the guest's first touch, kept in
// a local overlay, while the snapshot's recorded working set is fetched
// ahead in that order, then the rest. The VMM maps the file shared as
// guest RAM, so the guest runs before its memory is local.
//
// A file records what a snapshot needs next: the chunks the guest touched
// since the restore, in first-touch order (the next restore's working
// set), and the chunks written since the last capture (a capture reads
// those and keeps every other chunk's ref unread).
type Pager struct {
	cfg  Config
	log  *slog.Logger
	srv  *fuse.Server
	conn uint32 // the FUSE connection, to abort at Close

	mu    sync.Mutex
	files map[uint64]*File // by node id
	names map[string]uint64
	next  uint64
}

// attrTTL is how long the kernel may keep names and sizes: they never
// change while a file exists.
const attrTTL = time.Hour

// Available reports whether this host can mount a pager: /dev/fuse opens.
func Available() error {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("lazy memory needs /dev/fuse: %w", err)
	}
	return f.Close()
}

// Mount mounts the file system at cfg.Mount and serves it until Close.
// The caller needs CAP_SYS_ADMIN (the host agent runs as root).
func Mount(cfg Config, log *slog.Logger) (*Pager, error) {
	if err := os.MkdirAll(cfg.Mount, 0o700); err != nil {
		return nil, fmt.Errorf("mount lazy memory: %w", err)
	}
	// A previous agent's mount: its server is gone, so detach it.
	_ = syscall.Unmount(cfg.Mount, syscall.MNT_DETACH)
	p := &Pager{cfg: cfg, log: log, files: map[uint64]*File{}, names: map[string]uint64{}, next: 2}
	raw := &rawFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), p: p}
	// No process may be spawned while the device is open and inheritable.
	syscall.ForkLock.Lock()
	srv, err := fuse.NewServer(raw, cfg.Mount, &fuse.MountOptions{
		FsName: "engrams-pager", Name: "engrams", DirectMount: true, DirectMountStrict: true,
		MaxWrite: 1 << 20, MaxReadAhead: 128 << 10, DisableXAttrs: true, MaxBackground: 64,
		Options: []string{"default_permissions"},
		// Answers are copied, never spliced (go-fuse would log every read
		// larger than a pipe); its own log says nothing we act on.
		DisableSplice: true, Logger: stdlog.New(io.Discard, "", 0),
	})
	if err == nil {
		err = fuseFdsCloseOnExec()
	}
	syscall.ForkLock.Unlock()
	if err != nil {
		if srv != nil {
			_ = srv.Unmount()
		}
		return nil, fmt.Errorf("mount lazy memory at %s: %w", cfg.Mount, err)
	}
	p.srv = srv
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		_ = srv.Unmount()
		return nil, fmt.Errorf("mount lazy memory at %s: %w", cfg.Mount, err)
	}
	if p.conn, err = connection(cfg.Mount); err != nil { // served now: the stat is answered
		_ = srv.Unmount()
		return nil, fmt.Errorf("mount lazy memory at %s: %w", cfg.Mount, err)
	}
	if err := tuneWriteback(cfg.Mount); err != nil {
		log.Info("guest memory writeback keeps the kernel's FUSE limits", "err", err)
	}
	return p, nil
}

// Close unmounts the file system and ends its connection: a VMM still
// mapping a file keeps what it faulted in and gets errors for the rest
// (rather than waiting for a server that is gone).
func (p *Pager) Close() {
	if err := p.srv.Unmount(); err != nil {
		_ = syscall.Unmount(p.cfg.Mount, syscall.MNT_DETACH)
		if err := abortConnection(p.conn); err != nil {
			p.log.Warn("lazy memory: abort the FUSE connection", "err", err)
		}
	}
	p.srv.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, f := range p.files {
		f.cancel()
		_ = f.overlay.Close()
		delete(p.files, id)
	}
}

// Add serves m (a snapshot's memory) as the file name, its fetched and
// written chunks kept in a new overlay file at overlay (on local disk,
// in the machine's dir).
func (p *Pager) Add(name, overlay string, m chunk.Manifest, src Source) (*File, error) {
	if name == "" || name != filepath.Base(name) || name[0] == '.' {
		return nil, fmt.Errorf("lazy memory: bad name %q", name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, dup := p.names[name]; dup {
		return nil, fmt.Errorf("lazy memory %s: already served", name)
	}
	f, err := newFile(context.Background(), name, filepath.Join(p.cfg.Mount, name), overlay, m, src)
	if err != nil {
		return nil, err
	}
	id := p.next
	p.next++
	p.files[id], p.names[name] = f, id
	return f, nil
}

// Remove stops serving name and deletes its overlay. Call it once no VMM
// maps the file.
func (p *Pager) Remove(name string) {
	p.mu.Lock()
	id, ok := p.names[name]
	f := p.files[id]
	delete(p.names, name)
	delete(p.files, id)
	p.mu.Unlock()
	if !ok {
		return
	}
	f.cancel()
	_ = f.overlay.Close()
	if err := os.Remove(f.overlay.Name()); err != nil && !errors.Is(err, os.ErrNotExist) {
		p.log.Warn("remove lazy memory overlay", "name", name, "err", err)
	}
	// Drop what the kernel cached of it: the name may come back as another file.
	_ = p.srv.EntryNotify(fuse.FUSE_ROOT_ID, name)
	_ = p.srv.InodeNotify(id, 0, -1)
}

func (p *Pager) file(id uint64) *File {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.files[id]
}

func (p *Pager) lookup(name string) (uint64, *File) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.names[name]
	if !ok {
		return 0, nil
	}
	return id, p.files[id]
}
