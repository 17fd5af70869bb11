package vmimage

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/pierrec/lz4/v4"
)

// Kernel returns the cached uncompressed PVH vmlinux and the kernel version,
// extracting it from the configured bzImage on first use.
func (b *Builder) Kernel(ctx context.Context) (path, version string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bz, err := os.ReadFile(b.cfg.KernelImage)
	if err != nil {
		return "", "", fmt.Errorf("read kernel image: %w", err)
	}
	version, err = KernelVersion(bz)
	if err != nil {
		return "", "", fmt.Errorf("read kernel image %s: %w", b.cfg.KernelImage, err)
	}
	k, sum := newKey("vmlinux")
	k.str(version)
	k.h.Write(bz)
	p, ok := b.cached(sum())
	if ok {
		return p, version, nil
	}
	err = writeAtomic(p, func(tmp string) error {
		f, err := os.Create(tmp)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := ExtractVmlinux(bz, f); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		return VerifyPVH(tmp)
	})
	if err != nil {
		return "", "", fmt.Errorf("extract vmlinux from %s: %w", b.cfg.KernelImage, err)
	}
	b.log.Info("extracted vmlinux", "kernel", b.cfg.KernelImage, "version", version, "path", p)
	return p, version, nil
}

// bzImage setup header offsets (Documentation/x86/boot.rst).
const (
	offSetupSects  = 0x1f1
	offHeaderMagic = 0x202 // "HdrS"
	offKernelVer   = 0x20e
	offPayloadOff  = 0x248
	offPayloadLen  = 0x24c
)

func setupHeader(bz []byte) (protStart int, err error) {
	if len(bz) < 0x260 || string(bz[offHeaderMagic:offHeaderMagic+4]) != "HdrS" {
		return 0, errors.New("not a bzImage: no HdrS setup header")
	}
	sects := int(bz[offSetupSects])
	if sects == 0 {
		sects = 4
	}
	return (sects + 1) * 512, nil
}

// KernelVersion reads the version string from a bzImage setup header,
// e.g. "6.1.0-57-cloud-amd64".
func KernelVersion(bz []byte) (string, error) {
	if _, err := setupHeader(bz); err != nil {
		return "", err
	}
	off := int(binary.LittleEndian.Uint16(bz[offKernelVer:])) + 0x200
	if off <= 0x200 || off >= len(bz) {
		return "", errors.New("no kernel version in setup header")
	}
	s := bz[off:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	f := strings.Fields(string(s))
	if len(f) == 0 {
		return "", errors.New("empty kernel version in setup header")
	}
	return f[0], nil
}

// Payload returns the compressed kernel embedded in a bzImage.
func Payload(bz []byte) ([]byte, error) {
	start, err := setupHeader(bz)
	if err != nil {
		return nil, err
	}
	off := int(binary.LittleEndian.Uint32(bz[offPayloadOff:]))
	n := int(binary.LittleEndian.Uint32(bz[offPayloadLen:]))
	if n == 0 || start+off+n > len(bz) {
		return nil, fmt.Errorf("payload %d+%d out of range (file %d bytes)", start+off, n, len(bz))
	}
	return bz[start+off : start+off+n], nil
}

// ExtractVmlinux decompresses the payload of bzImage bz into w. LZ4 (legacy
// frame) and gzip payloads are supported.
func ExtractVmlinux(bz []byte, w io.Writer) error {
	p, err := Payload(bz)
	if err != nil {
		return err
	}
	switch {
	case bytes.HasPrefix(p, []byte{0x02, 0x21, 0x4c, 0x18}):
		return decompressLZ4Legacy(p, w)
	case bytes.HasPrefix(p, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(bytes.NewReader(p))
		if err != nil {
			return fmt.Errorf("gzip payload: %w", err)
		}
		zr.Multistream(false)
		if _, err := io.Copy(w, zr); err != nil {
			return fmt.Errorf("gzip payload: %w", err)
		}
		return nil
	default:
		return fmt.Errorf("unsupported payload compression (magic % x): only lz4 and gzip", p[:min(6, len(p))])
	}
}

// decompressLZ4Legacy handles the kernel's "lz4 -l" stream, which is
// followed by the 4-byte little-endian uncompressed size (size_append).
func decompressLZ4Legacy(p []byte, w io.Writer) error {
	if len(p) < 8 {
		return errors.New("lz4 payload too short")
	}
	want := binary.LittleEndian.Uint32(p[len(p)-4:])
	cw := &countWriter{w: w}
	zr := lz4.NewReader(bytes.NewReader(p[:len(p)-4]))
	if _, err := io.Copy(cw, zr); err != nil {
		return fmt.Errorf("lz4 payload: %w", err)
	}
	if uint32(cw.n) != want {
		return fmt.Errorf("lz4 payload: got %d bytes, size trailer says %d", cw.n, want)
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// VerifyPVH checks that the ELF at path carries the Xen PVH entry note
// (XEN_ELFNOTE_PHYS32_ENTRY, type 18), which QEMU needs to boot it directly.
func VerifyPVH(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("open vmlinux: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		data, err := io.ReadAll(p.Open())
		if err != nil {
			return fmt.Errorf("read notes: %w", err)
		}
		if hasNote(data, f.ByteOrder, "Xen", 18) {
			return nil
		}
	}
	return errors.New("vmlinux has no PVH entry note (kernel built without CONFIG_PVH)")
}

func hasNote(data []byte, bo binary.ByteOrder, name string, typ uint32) bool {
	align := func(n uint32) uint32 { return (n + 3) &^ 3 }
	for len(data) >= 12 {
		nsz, dsz, t := bo.Uint32(data), bo.Uint32(data[4:]), bo.Uint32(data[8:])
		rest := data[12:]
		if uint64(align(nsz))+uint64(align(dsz)) > uint64(len(rest)) {
			return false
		}
		n := strings.TrimRight(string(rest[:nsz]), "\x00")
		if n == name && t == typ {
			return true
		}
		data = rest[align(nsz)+align(dsz):]
	}
	return false
}
