package vmimage

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"
)

type cpioEntry struct {
	name       string
	mode       uint32
	data       string
	rmaj, rmin uint32
}

// parseNewc is an independent reader of newc archives for the round trip.
func parseNewc(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	off := 0
	align := func(n int) int { return (n + 3) &^ 3 }
	for {
		if off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("bad header at %d", off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatalf("field %d at %d: %v", i, off, err)
			}
			return uint32(v)
		}
		mode, size, rmaj, rmin, nsize := field(1), int(field(6)), field(9), field(10), int(field(11))
		name := string(b[off+110 : off+110+nsize-1])
		off = align(off + 110 + nsize)
		data := string(b[off : off+size])
		off = align(off + size)
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Errorf("%d bytes after trailer", len(b)-off)
			}
			return out
		}
		out = append(out, cpioEntry{name, mode, data, rmaj, rmin})
	}
}

func TestCPIORoundTrip(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := NewCPIOWriter(&buf)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Mkdir("/dev", 0o755))
	must(w.CharDev("/dev/console", 0o600, 5, 1))
	must(w.File("/init", 0o755, []byte("#!init")))
	must(w.File("/lib/modules/a.ko", 0o644, []byte("abc")))
	must(w.Symlink("/bin/sh", "/bin/busybox"))
	must(w.File("/empty", 0o600, nil))
	must(w.Close())
	got := parseNewc(t, buf.Bytes())
	want := []cpioEntry{
		{"dev", cpioDir | 0o755, "", 0, 0},
		{"dev/console", cpioChr | 0o600, "", 5, 1},
		{"init", cpioReg | 0o755, "#!init", 0, 0},
		{"lib", cpioDir | 0o755, "", 0, 0},
		{"lib/modules", cpioDir | 0o755, "", 0, 0},
		{"lib/modules/a.ko", cpioReg | 0o644, "abc", 0, 0},
		{"bin", cpioDir | 0o755, "", 0, 0},
		{"bin/sh", cpioLink | 0o777, "/bin/busybox", 0, 0},
		{"empty", cpioReg | 0o600, "", 0, 0},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("entries:\n got %v\nwant %v", got, want)
	}
}
