package harness

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/engrams/engrams/internal/guestapi"
)

// binaryInfo is what an x86-64 ELF program needs of the image it runs on.
type binaryInfo struct {
	Libc     string   // Libc*: the C library of its dynamic loader; LibcNone when static
	GlibcMin string   // newest GLIBC_x.y symbol version it needs ("" if none)
	Libs     []string // shared libraries it needs beyond its C library's own
}

// libcOwn are the sonames glibc and musl provide themselves.
var libcOwn = map[string]bool{
	"libc.so.6": true, "libm.so.6": true, "libdl.so.2": true, "libpthread.so.0": true,
	"librt.so.1": true, "libresolv.so.2": true, "libutil.so.1": true, "libanl.so.1": true,
	"ld-linux-x86-64.so.2": true, "libc.musl-x86_64.so.1": true,
}

// isELF says whether the file at p starts with the ELF magic.
func isELF(p string) (bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil {
		return false, nil // shorter than a header: not ELF
	}
	return bytes.Equal(magic, []byte(elf.ELFMAG)), nil
}

// inspectELF reads what the x86-64 ELF program at p needs: its C library
// (by its PT_INTERP loader), the glibc version and the other libraries.
func inspectELF(p string) (binaryInfo, error) {
	f, err := elf.Open(p)
	if err != nil {
		return binaryInfo{}, fmt.Errorf("read ELF %s: %w", p, err)
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		return binaryInfo{}, fmt.Errorf("ELF %s is %v %v, not x86-64", p, f.Class, f.Machine)
	}
	info := binaryInfo{Libc: guestapi.LibcNone}
	interp, err := elfInterp(f)
	if err != nil {
		return binaryInfo{}, fmt.Errorf("read ELF %s: %w", p, err)
	}
	switch base := path.Base(interp); {
	case interp == "":
		return info, nil // static (static-pie too)
	case base == "ld-linux-x86-64.so.2":
		info.Libc = guestapi.LibcGlibc
	case strings.HasPrefix(base, "ld-musl-"):
		info.Libc = guestapi.LibcMusl
	default:
		return binaryInfo{}, fmt.Errorf("ELF %s: unknown dynamic loader %q", p, interp)
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return binaryInfo{}, fmt.Errorf("read ELF %s: needed libraries: %w", p, err)
	}
	for _, l := range libs {
		if !libcOwn[l] {
			info.Libs = append(info.Libs, l)
		}
	}
	slices.Sort(info.Libs)
	if info.Libc == guestapi.LibcGlibc {
		if info.GlibcMin, err = glibcNeeded(f); err != nil {
			return binaryInfo{}, fmt.Errorf("read ELF %s: %w", p, err)
		}
	}
	return info, nil
}

func elfInterp(f *elf.File) (string, error) {
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(prog.Open(), 4096))
		if err != nil {
			return "", fmt.Errorf("interpreter: %w", err)
		}
		return strings.TrimRight(string(b), "\x00"), nil
	}
	return "", nil
}

// glibcNeeded is the newest GLIBC_x.y[.z] version among f's version needs,
// as "x.y[.z]".
func glibcNeeded(f *elf.File) (string, error) {
	if f.SectionByType(elf.SHT_GNU_VERNEED) == nil {
		return "", nil // nothing versioned is needed
	}
	needs, err := f.DynamicVersionNeeds()
	if err != nil {
		return "", fmt.Errorf("version needs: %w", err)
	}
	newest := ""
	for _, n := range needs {
		for _, d := range n.Needs {
			v, ok := strings.CutPrefix(d.Dep, "GLIBC_")
			if !ok || v == "" || v[0] < '0' || v[0] > '9' {
				continue
			}
			if newest == "" || guestapi.CompareVersions(v, newest) > 0 {
				newest = v
			}
		}
	}
	return majorMinor(newest), nil
}

// majorMinor keeps the first two parts of a dotted version.
func majorMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) > 2 {
		parts = parts[:2]
	}
	return strings.Join(parts, ".")
}
