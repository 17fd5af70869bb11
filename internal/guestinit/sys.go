package guestinit

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

func putInt32(b []byte, v int32) { binary.NativeEndian.PutUint32(b, uint32(v)) }

func ioctlPtr(fd uintptr, req uint, buf []byte) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, fd, uintptr(req), uintptr(unsafe.Pointer(&buf[0])))
	if e != 0 {
		return e
	}
	return nil
}

// LoadModules loads each module file listed (one path a line) in list with
// finit_module(2), in order. Already-loaded modules are not an error.
func LoadModules(list string) (int, error) {
	data, err := os.ReadFile(list)
	if err != nil {
		if os.IsNotExist(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("read module list: %w", err)
	}
	n := 0
	for _, p := range strings.Fields(string(data)) {
		if err := loadModule(p); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("load module %s: %w", path, err)
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && err != unix.EEXIST {
		return fmt.Errorf("load module %s: %w", path, err)
	}
	return nil
}

func nlPtr(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }

func nativeU32(b []byte) uint32 { return binary.NativeEndian.Uint32(b) }
