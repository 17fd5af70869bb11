package oci

import (
	"archive/tar"
	"fmt"
	"io"
	"strings"
)

// Limits bound one pull. An image is hostile input: what its layers make the
// coordinator write, read and remember is counted while it is read (bytes written
// and read, never the sizes headers claim) and the pull stops at the first bound
// it passes, with a LimitError. A zero field takes its default (DefaultLimits).
type Limits struct {
	// TreeBytes caps the file bytes written into the tree, all layers (a file a later
	// layer replaces was written, so it counts). Default DefaultTreeBytes.
	TreeBytes int64
	// Inodes caps the files, directories and symlinks in the tree at once (a hard
	// link shares its target's). Default DefaultInodes.
	Inodes int
	// Entries caps the tar entries read, all layers, whatever they are. Default
	// 1,000,000: the tree keeps about 200 bytes of bookkeeping per name, so this
	// bounds its memory (about 200 MiB) and the work a layer of empty entries causes
	// whatever the root disk.
	Entries int
	// Layers caps the layers of the manifest. Default 128: Docker's overlay2 stacks
	// no more, so no image that runs under Docker has more.
	Layers int
	// StreamBytes caps the uncompressed bytes read, all layers. Default TreeBytes
	// plus 2 KiB per entry of Entries: every byte of a tar stream is file content, a
	// header or PAX block or padding, so a stream within the other bounds is shorter
	// and a longer one (zeros after the end of the archive) is a bomb. The layers'
	// compressed sizes, which the manifest declares, may not pass it by more than
	// 1/256 either (what compression adds to incompressible bytes).
	StreamBytes int64
	// Expansion and ExpansionSlack: the uncompressed bytes read may pass Expansion
	// times the compressed bytes read (all layers so far) by at most ExpansionSlack.
	// Defaults 100 and 256 MiB: real layers expand 2–10 times, gzip of zeros about
	// 1000 times and zstd far more, so a bomb stops after writing about
	// ExpansionSlack instead of TreeBytes.
	Expansion      int
	ExpansionSlack int64
	// Per entry: NameBytes (default 4095, PATH_MAX less its NUL: the guest could not
	// open a longer path), ComponentBytes (255, NAME_MAX: ext4 stores no longer
	// name), LinkBytes (4095: a longer symlink target is ENAMETOOLONG), PAXRecords
	// (64; extended attributes are PAX records) and MetaBytes (64 KiB: name, link
	// target, user and group names and PAX records together; archive/tar itself
	// stops a header at 1 MiB).
	NameBytes, ComponentBytes, LinkBytes, PAXRecords, MetaBytes int
	// ConfigBytes caps the image config's size as the manifest declares it (it is
	// read into memory). Default 8 MiB; configs are kilobytes.
	ConfigBytes int64
}

// Defaults of the Limits that depend on the root disk: those of a 4 GiB disk, the
// default (image.DefaultDiskGiB). TreeLimits gives them for any disk.
const (
	DefaultTreeBytes = 4<<30 - 4<<30/64
	DefaultInodes    = 4<<30/ext4InodeRatio - ext4ReservedInodes
)

// The root filesystem's layout (vmimage pins it): one 256-byte inode per 16 KiB of
// disk, and ext4 keeps the first 11 inodes (lost+found is the 11th).
const (
	ext4InodeRatio     = 16384
	ext4InodeBytes     = 256
	ext4ReservedInodes = 11
)

// TreeLimits are the bounds a tree must stay within to fit a root disk of disk
// bytes: no more file bytes than the disk less its inode tables (1/64 of it), no
// more inodes than it has. A tree past either can never be built, so the pull stops
// there rather than after writing all of it.
func TreeLimits(disk int64) Limits {
	return Limits{
		TreeBytes: disk - disk/ext4InodeRatio*ext4InodeBytes,
		Inodes:    int(max(disk/ext4InodeRatio-ext4ReservedInodes, 1)),
	}
}

// DefaultLimits are the bounds a zero Limits field takes.
func DefaultLimits() Limits {
	return Limits{
		TreeBytes: DefaultTreeBytes, Inodes: DefaultInodes, Entries: 1_000_000, Layers: 128,
		Expansion: 100, ExpansionSlack: 256 << 20,
		NameBytes: 4095, ComponentBytes: 255, LinkBytes: 4095, PAXRecords: 64, MetaBytes: 64 << 10,
		ConfigBytes: 8 << 20,
	}
}

// streamBytesPerEntry is what StreamBytes allows per entry besides file content.
const streamBytesPerEntry = 2 << 10

// Over returns l with every non-zero field of o in place of its own.
func (l Limits) Over(o Limits) Limits {
	set64 := func(dst *int64, v int64) {
		if v != 0 {
			*dst = v
		}
	}
	set := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	set64(&l.TreeBytes, o.TreeBytes)
	set64(&l.StreamBytes, o.StreamBytes)
	set64(&l.ExpansionSlack, o.ExpansionSlack)
	set64(&l.ConfigBytes, o.ConfigBytes)
	for _, p := range []struct {
		dst *int
		v   int
	}{
		{&l.Inodes, o.Inodes}, {&l.Entries, o.Entries}, {&l.Layers, o.Layers}, {&l.Expansion, o.Expansion},
		{&l.NameBytes, o.NameBytes}, {&l.ComponentBytes, o.ComponentBytes}, {&l.LinkBytes, o.LinkBytes},
		{&l.PAXRecords, o.PAXRecords}, {&l.MetaBytes, o.MetaBytes},
	} {
		set(p.dst, p.v)
	}
	return l
}

// complete fills the zero fields with the defaults, StreamBytes from the others.
func (l Limits) complete() Limits {
	l = DefaultLimits().Over(l)
	if l.StreamBytes == 0 {
		l.StreamBytes = l.TreeBytes + int64(l.Entries)*streamBytesPerEntry
	}
	return l
}

// LimitError is the error (wrapping ErrTooLarge) of a pull stopped by one of its
// Limits: which one, its value and what passed it.
type LimitError struct {
	Limit string // the Limits field: "TreeBytes", "Inodes", "Entries", "StreamBytes", "Expansion", ...
	Max   int64  // its value
	msg   string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s: %s; the image is refused", ErrTooLarge, e.msg)
}

func (e *LimitError) Unwrap() error { return ErrTooLarge }

// meter counts what one pull wrote and read against its Limits. The first bound
// passed is kept (err) and returned by every later check, so a reader that wraps
// or drops errors cannot hide it.
type meter struct {
	lim     Limits
	entries int
	inodes  int
	tree    int64       // file bytes written
	stream  int64       // uncompressed bytes read
	packed  int64       // compressed bytes read by the layers before the current one
	blob    *blobReader // the current layer's compressed bytes; nil between layers
	err     error
}

func newMeter(lim Limits) *meter { return &meter{lim: lim.complete()} }

// fail records (once) and returns the error of passing limit.
func (m *meter) fail(limit string, max int64, format string, args ...any) error {
	if m.err == nil {
		m.err = &LimitError{Limit: limit, Max: max, msg: fmt.Sprintf(format, args...)}
	}
	return m.err
}

// packedBytes is the compressed bytes read so far, all layers.
func (m *meter) packedBytes() int64 {
	if m.blob == nil {
		return m.packed
	}
	return m.packed + m.blob.n
}

// endLayer moves the current layer's compressed bytes into packed.
func (m *meter) endLayer() {
	m.packed, m.blob = m.packedBytes(), nil
}

// read counts n uncompressed bytes read.
func (m *meter) read(n int) error {
	if m.err != nil {
		return m.err
	}
	m.stream += int64(n)
	if m.stream > m.lim.StreamBytes {
		return m.fail("StreamBytes", m.lim.StreamBytes, "more than %d bytes uncompressed", m.lim.StreamBytes)
	}
	packed := m.packedBytes()
	if allowed := int64(m.lim.Expansion)*packed + m.lim.ExpansionSlack; m.stream > allowed {
		return m.fail("Expansion", int64(m.lim.Expansion),
			"%.1f MiB uncompressed from %.1f KiB compressed, more than %d times as much plus %d MiB (a decompression bomb)",
			float64(m.stream)/(1<<20), float64(packed)/(1<<10), m.lim.Expansion, m.lim.ExpansionSlack>>20)
	}
	return nil
}

// entry counts one tar entry and checks its metadata.
func (m *meter) entry(hdr *tar.Header) error {
	if m.err != nil {
		return m.err
	}
	if m.entries++; m.entries > m.lim.Entries {
		return m.fail("Entries", int64(m.lim.Entries), "more than %d entries", m.lim.Entries)
	}
	return m.checkMeta(hdr)
}

// checkMeta refuses an entry whose metadata passes the per-entry bounds.
func (m *meter) checkMeta(hdr *tar.Header) error {
	l := m.lim
	if n := len(hdr.Name); n > l.NameBytes {
		return unsafeEntry(hdr.Name, "has a name of %d bytes (at most %d)", n, l.NameBytes)
	}
	for c := range strings.SplitSeq(hdr.Name, "/") {
		if len(c) > l.ComponentBytes {
			return unsafeEntry(hdr.Name, "has a name component of %d bytes (at most %d)", len(c), l.ComponentBytes)
		}
	}
	if n := len(hdr.Linkname); n > l.LinkBytes {
		return unsafeEntry(hdr.Name, "has a link target of %d bytes (at most %d)", n, l.LinkBytes)
	}
	if n := len(hdr.PAXRecords); n > l.PAXRecords {
		return unsafeEntry(hdr.Name, "has %d PAX records (at most %d)", n, l.PAXRecords)
	}
	size := len(hdr.Name) + len(hdr.Linkname) + len(hdr.Uname) + len(hdr.Gname)
	for k, v := range hdr.PAXRecords {
		size += len(k) + len(v)
	}
	if size > l.MetaBytes {
		return unsafeEntry(hdr.Name, "has %d bytes of metadata (at most %d)", size, l.MetaBytes)
	}
	return nil
}

// addInode counts one more file, directory or symlink in the tree.
func (m *meter) addInode() error {
	if m.err != nil {
		return m.err
	}
	if m.inodes++; m.inodes > m.lim.Inodes {
		return m.fail("Inodes", int64(m.lim.Inodes), "more than %d files, directories and symlinks in the tree", m.lim.Inodes)
	}
	return nil
}

// wantTree checks, before a file of size bytes is written, that it fits.
func (m *meter) wantTree(name string, size int64) error {
	if m.err != nil {
		return m.err
	}
	if size < 0 || m.tree+size > m.lim.TreeBytes {
		return m.fail("TreeBytes", m.lim.TreeBytes, "entry %s of %d bytes takes the tree past %d bytes of files",
			shown(name), size, m.lim.TreeBytes)
	}
	return nil
}

// countedReader counts the uncompressed bytes read through it.
type countedReader struct {
	r io.Reader
	m *meter
}

func (c countedReader) Read(p []byte) (int, error) {
	if c.m.err != nil {
		return 0, c.m.err
	}
	n, err := c.r.Read(p)
	if merr := c.m.read(n); merr != nil {
		return 0, merr
	}
	return n, err
}

// treeWriter counts the file bytes written through it and refuses any past
// TreeBytes, whatever the entry's header said.
type treeWriter struct {
	w    io.Writer
	m    *meter
	name string
}

func (t treeWriter) Write(p []byte) (int, error) {
	if err := t.m.wantTree(t.name, int64(len(p))); err != nil {
		return 0, err
	}
	n, err := t.w.Write(p)
	t.m.tree += int64(n)
	return n, err
}
