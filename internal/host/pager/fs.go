package pager

import (
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// rawFS answers the kernel: one flat directory of regular files, fixed in
// size, read and written (the VMM's writeback) through their File.
type rawFS struct {
	fuse.RawFileSystem
	p *Pager
}

func (fs *rawFS) String() string { return "engrams-pager" }

func fileAttr(id uint64, f *File, out *fuse.Attr) {
	out.Ino, out.Size, out.Mode, out.Nlink = id, uint64(f.size), syscall.S_IFREG|0o600, 1
	out.Blocks, out.Blksize = (uint64(f.size)+511)/512, 4096
}

func rootAttr(out *fuse.Attr) {
	out.Ino, out.Mode, out.Nlink = fuse.FUSE_ROOT_ID, syscall.S_IFDIR|0o700, 2
}

func (fs *rawFS) Lookup(_ <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if h.NodeId != fuse.FUSE_ROOT_ID {
		return fuse.ENOTDIR
	}
	id, f := fs.p.lookup(name)
	if f == nil {
		return fuse.ENOENT
	}
	out.NodeId, out.Generation = id, 1
	out.SetEntryTimeout(attrTTL)
	out.SetAttrTimeout(attrTTL)
	fileAttr(id, f, &out.Attr)
	return fuse.OK
}

func (fs *rawFS) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	out.SetTimeout(attrTTL)
	if in.NodeId == fuse.FUSE_ROOT_ID {
		rootAttr(&out.Attr)
		return fuse.OK
	}
	f := fs.p.file(in.NodeId)
	if f == nil {
		return fuse.ENOENT
	}
	fileAttr(in.NodeId, f, &out.Attr)
	return fuse.OK
}

// SetAttr accepts what changes nothing (a VMM truncating the file to its
// own size); the size is the snapshot's and stays.
func (fs *rawFS) SetAttr(_ <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	f := fs.p.file(in.NodeId)
	if f == nil {
		return fuse.ENOENT
	}
	if sz, ok := in.GetSize(); ok && int64(sz) != f.size {
		return fuse.EPERM
	}
	out.SetTimeout(attrTTL)
	fileAttr(in.NodeId, f, &out.Attr)
	return fuse.OK
}

func (fs *rawFS) Open(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if fs.p.file(in.NodeId) == nil {
		return fuse.ENOENT
	}
	// Keep the page cache across opens: it is the guest's memory.
	out.OpenFlags = fuse.FOPEN_KEEP_CACHE
	return fuse.OK
}

func (fs *rawFS) OpenDir(_ <-chan struct{}, in *fuse.OpenIn, _ *fuse.OpenOut) fuse.Status {
	if in.NodeId != fuse.FUSE_ROOT_ID {
		return fuse.ENOTDIR
	}
	return fuse.OK
}

func (fs *rawFS) ReadDir(_ <-chan struct{}, _ *fuse.ReadIn, _ *fuse.DirEntryList) fuse.Status {
	return fuse.OK // nothing to list: files are reached by name
}

func (fs *rawFS) Read(_ <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	f := fs.p.file(in.NodeId)
	if f == nil {
		return nil, fuse.ENOENT
	}
	n, err := f.read(int64(in.Offset), buf[:min(len(buf), int(in.Size))])
	if err != nil {
		fs.p.log.Error("lazy memory read failed", "name", f.name, "offset", in.Offset, "err", err)
		return nil, fuse.EIO
	}
	return fuse.ReadResultData(buf[:n]), fuse.OK
}

func (fs *rawFS) Write(_ <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	f := fs.p.file(in.NodeId)
	if f == nil {
		return 0, fuse.ENOENT
	}
	n, err := f.write(int64(in.Offset), data)
	if err != nil {
		fs.p.log.Error("lazy memory write failed", "name", f.name, "offset", in.Offset, "err", err)
		return uint32(n), fuse.EIO
	}
	return uint32(n), fuse.OK
}

func (fs *rawFS) Fsync(_ <-chan struct{}, _ *fuse.FsyncIn) fuse.Status   { return fuse.OK }
func (fs *rawFS) Flush(_ <-chan struct{}, _ *fuse.FlushIn) fuse.Status   { return fuse.OK }
func (fs *rawFS) Release(_ <-chan struct{}, _ *fuse.ReleaseIn)           {}
func (fs *rawFS) Access(_ <-chan struct{}, _ *fuse.AccessIn) fuse.Status { return fuse.OK }

func (fs *rawFS) StatFs(_ <-chan struct{}, _ *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	out.Bsize, out.Frsize, out.NameLen = 4096, 4096, 255
	return fuse.OK
}
