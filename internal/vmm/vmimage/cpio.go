package vmimage

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// CPIOWriter writes an uncompressed newc ("070701") archive, the format the
// kernel unpacks as an initramfs.
type CPIOWriter struct {
	w    *bufio.Writer
	ino  uint32
	off  int64
	dirs map[string]bool
}

// NewCPIOWriter returns a writer on w. Close writes the trailer.
func NewCPIOWriter(w io.Writer) *CPIOWriter {
	return &CPIOWriter{w: bufio.NewWriterSize(w, 1<<20), ino: 1, dirs: map[string]bool{}}
}

// Mode bits of newc entries.
const (
	cpioDir  = 0o040000
	cpioReg  = 0o100000
	cpioLink = 0o120000
	cpioChr  = 0o020000
)

type cpioHeader struct {
	name             string
	mode             uint32
	size             int64
	nlink            uint32
	rdevMaj, rdevMin uint32
}

func (c *CPIOWriter) header(h cpioHeader) error {
	name := strings.TrimPrefix(path.Clean("/"+h.name), "/")
	if h.name == "TRAILER!!!" {
		name = h.name
	}
	if name == "" {
		name = "."
	}
	nlink := h.nlink
	if nlink == 0 {
		nlink = 1
	}
	c.ino++
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, h.mode, 0, 0, nlink, 0, uint32(h.size), 0, 0, h.rdevMaj, h.rdevMin, len(name)+1, 0)
	if _, err := c.w.WriteString(hdr + name + "\x00"); err != nil {
		return err
	}
	c.off += int64(len(hdr) + len(name) + 1)
	return c.pad()
}

func (c *CPIOWriter) pad() error {
	n := (4 - c.off%4) % 4
	c.off += n
	_, err := c.w.Write(make([]byte, n))
	return err
}

// Mkdir adds a directory and, first, any missing parents.
func (c *CPIOWriter) Mkdir(name string, perm os.FileMode) error {
	name = path.Clean("/" + name)
	if name == "/" || c.dirs[name] {
		return nil
	}
	if err := c.Mkdir(path.Dir(name), 0o755); err != nil {
		return err
	}
	c.dirs[name] = true
	return c.header(cpioHeader{name: name, mode: cpioDir | uint32(perm.Perm()), nlink: 2})
}

// File adds a regular file with the given content.
func (c *CPIOWriter) File(name string, perm os.FileMode, data []byte) error {
	if err := c.Mkdir(path.Dir(path.Clean("/"+name)), 0o755); err != nil {
		return err
	}
	if int64(len(data)) > 0xffffffff {
		return fmt.Errorf("cpio: %s too large", name)
	}
	if err := c.header(cpioHeader{name: name, mode: cpioReg | uint32(perm.Perm()), size: int64(len(data))}); err != nil {
		return err
	}
	if _, err := c.w.Write(data); err != nil {
		return err
	}
	c.off += int64(len(data))
	return c.pad()
}

// Symlink adds a symbolic link name -> target.
func (c *CPIOWriter) Symlink(name, target string) error {
	if err := c.Mkdir(path.Dir(path.Clean("/"+name)), 0o755); err != nil {
		return err
	}
	if err := c.header(cpioHeader{name: name, mode: cpioLink | 0o777, size: int64(len(target))}); err != nil {
		return err
	}
	if _, err := c.w.WriteString(target); err != nil {
		return err
	}
	c.off += int64(len(target))
	return c.pad()
}

// CharDev adds a character device node.
func (c *CPIOWriter) CharDev(name string, perm os.FileMode, major, minor uint32) error {
	if err := c.Mkdir(path.Dir(path.Clean("/"+name)), 0o755); err != nil {
		return err
	}
	return c.header(cpioHeader{name: name, mode: cpioChr | uint32(perm.Perm()), rdevMaj: major, rdevMin: minor})
}

// Close writes the trailer and flushes. It does not close the underlying writer.
func (c *CPIOWriter) Close() error {
	if err := c.header(cpioHeader{name: "TRAILER!!!"}); err != nil {
		return err
	}
	return c.w.Flush()
}
