package oci

import (
	"archive/tar"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func node(name string, typ byte) ent { return ent{name: name, typ: typ, mode: 0o666} }

// Device nodes and FIFOs are never created on the coordinator, and never fail the
// image: they are listed as left out, as the final image would have held them
// (replaced, whited out or hidden by a later layer: not listed).
func TestPullLeavesOutDevicesAndFIFOs(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, nil)
	char, block, fifo := LeftOutCharDevice, LeftOutBlockDevice, LeftOutFIFO
	tests := []struct {
		name   string
		layers [][]ent
		want   []LeftOut
		files  []string // must be regular files afterwards
	}{
		{"debootstrap /dev, docker import names", [][]ent{{
			dir("./", 0o755), dir("./dev/", 0o755), node("./dev/console", tar.TypeChar), node("./dev/null", tar.TypeChar),
			node("./dev/loop0", tar.TypeBlock), symlink("./dev/fd", "/proc/self/fd"), dir("./dev/pts/", 0o755),
			node("./run/initctl", tar.TypeFifo),
		}}, []LeftOut{{"/dev/console", char}, {"/dev/loop0", block}, {"/dev/null", char}, {"/run/initctl", fifo}}, nil},
		{"a device replacing a file", [][]ent{{file("dev/null", "was a file", 0o644)}, {node("dev/null", tar.TypeChar)}},
			[]LeftOut{{"/dev/null", char}}, nil},
		{"a device replacing a directory", [][]ent{{dir("dev/shm/", 0o755), file("dev/shm/x", "x", 0o644)}, {node("dev/shm", tar.TypeBlock)}},
			[]LeftOut{{"/dev/shm", block}}, nil},
		{"a file over a device in a later layer", [][]ent{{node("dev/null", tar.TypeChar)}, {file("dev/null", "now a file", 0o644)}},
			nil, []string{"dev/null"}},
		{"a device whited out", [][]ent{{node("dev/null", tar.TypeChar), node("dev/zero", tar.TypeChar)}, {whiteout("dev/.wh.null")}},
			[]LeftOut{{"/dev/zero", char}}, nil},
		{"a directory of devices whited out", [][]ent{{node("dev/a", tar.TypeChar), node("dev/b", tar.TypeBlock)}, {whiteout(".wh.dev")}},
			nil, nil},
		{"an opaque directory hides lower devices, not its own", [][]ent{
			{node("dev/old", tar.TypeChar)}, {node("dev/new", tar.TypeFifo), whiteout("dev/.wh..wh..opq")}},
			[]LeftOut{{"/dev/new", fifo}}, nil},
		{"hard links to a device are left out too", [][]ent{{node("dev/null", tar.TypeChar), hardlink("dev/null2", "dev/null")}},
			[]LeftOut{{"/dev/null", char}, {"/dev/null2", char}}, nil},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			layers := []v1.Layer{layer(t, file("bin/sh", "sh", 0o755))}
			for _, ents := range tc.layers {
				layers = append(layers, layer(t, ents...))
			}
			ref, _ := push(t, host, "dev"+string(rune('a'+i))+":v1", image(t, "amd64", v1.Config{}, layers...))
			img, err, target, _ := pullTo(t, newPuller(), ref, Credentials{})
			if err != nil {
				t.Fatalf("pull: %v", err)
			}
			if !reflect.DeepEqual(img.LeftOut, tc.want) {
				t.Errorf("left out %v, want %v", img.LeftOut, tc.want)
			}
			assertNoNodes(t, target)
			for _, l := range tc.want {
				if _, err := os.Lstat(filepath.Join(target, l.Name)); !os.IsNotExist(err) {
					t.Errorf("%s left out, but something is there (err %v)", l.Name, err)
				}
			}
			for _, f := range tc.files {
				if fi, err := os.Lstat(filepath.Join(target, f)); err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
					t.Errorf("%s: %v, %v; want the later layer's file", f, fi, err)
				}
			}
			if containsAny(img.Order, tc.want) {
				t.Errorf("order %v names a left-out entry", img.Order)
			}
		})
	}
}

func containsAny(order []string, left []LeftOut) bool {
	for _, o := range order {
		for _, l := range left {
			if "/"+o == l.Name {
				return true
			}
		}
	}
	return false
}

// assertNoNodes fails if the tree holds anything but directories, regular files
// and symlinks.
func assertNoNodes(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if m := d.Type(); m&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
			t.Errorf("%s is a %v on the coordinator", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLeftOutWarning(t *testing.T) {
	t.Parallel()
	many := make([]LeftOut, 20)
	for i := range many {
		many[i] = LeftOut{Name: "/dev/tty" + string(rune('a'+i)), Kind: LeftOutCharDevice}
	}
	tests := []struct {
		name string
		left []LeftOut
		want string
	}{
		{"none", nil, ""},
		{"one of each", []LeftOut{{"/dev/null", LeftOutCharDevice}, {"/run/initctl", LeftOutFIFO}},
			"left out 1 device node and 1 FIFO, never created from an image: /dev/null, /run/initctl; the guest's /dev is devtmpfs, with the kernel's own device nodes"},
		{"two FIFOs", []LeftOut{{"/a", LeftOutFIFO}, {"/b", LeftOutFIFO}}, "left out 2 FIFOs, never created"},
		{"many, shortened", many, "left out 20 device nodes, never created from an image: /dev/ttya, /dev/ttyb, /dev/ttyc, " +
			"/dev/ttyd, /dev/ttye, /dev/ttyf, /dev/ttyg, /dev/ttyh, /dev/ttyi, /dev/ttyj, /dev/ttyk, /dev/ttyl, and 8 more; "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := LeftOutWarning(tc.left)
			if (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
				t.Errorf("warning %q, want it to start with %q", got, tc.want)
			}
		})
	}
}
