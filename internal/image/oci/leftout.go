package oci

import (
	"archive/tar"
	"fmt"
	"slices"
	"strings"
)

// Kinds of entries left out of a tree.
const (
	LeftOutCharDevice  = "character device"
	LeftOutBlockDevice = "block device"
	LeftOutFIFO        = "FIFO"
)

// LeftOut is an entry of the image that the tree does not hold: a device node or a
// FIFO, never created on the coordinator (the guest's /dev is devtmpfs, with the
// kernel's own nodes). An image made by `docker import` of a debootstrap tree has
// /dev/console, /dev/null and the like.
type LeftOut struct {
	Name string // as the guest would see it: "/dev/console"
	Kind string // LeftOutCharDevice, LeftOutBlockDevice or LeftOutFIFO
}

// leaveOut stands in for a device node or FIFO at name: what was there goes (the
// entry replaces it, as it would in a container) and an empty placeholder file takes
// its place, so that later whiteouts, replacements and opaque directories apply to it
// as to any entry, and nothing but a plain file is ever created. finish removes the
// placeholders still there and lists them (Image.LeftOut).
func (t *tree) leaveOut(name string, hdr *tar.Header, kind string) error {
	if name == "." {
		return unsafeEntry(hdr.Name, "would replace the root directory")
	}
	f, err := t.create(name, hdr)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	t.left[name] = kind
	return nil
}

// removeLeftOut removes the placeholders still in the tree and lists them by name.
func (t *tree) removeLeftOut() error {
	names := make([]string, 0, len(t.left))
	for n := range t.left {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fi, err := t.root.Lstat(n)
		if err != nil {
			return fmt.Errorf("placeholder of %q: %w", n, err)
		}
		if !fi.Mode().IsRegular() || fi.Size() != 0 {
			return fmt.Errorf("placeholder of %q is now %v, %d bytes", n, fi.Mode().Type(), fi.Size())
		}
		kind := t.left[n]
		t.forget(n, fi)
		if err := t.root.Remove(n); err != nil {
			return fmt.Errorf("placeholder of %q: %w", n, err)
		}
		t.leftOut = append(t.leftOut, LeftOut{Name: "/" + n, Kind: kind})
	}
	clear(t.left)
	return nil
}

// leftOutShown is how many names LeftOutWarning lists.
const leftOutShown = 12

// LeftOutWarning says what an image's tree left out, in one line ("" for nothing):
// "left out 7 device nodes and 1 FIFO, never created from an image: /dev/console,
// /dev/null, …; the guest's /dev is devtmpfs, with the kernel's own device nodes".
func LeftOutWarning(left []LeftOut) string {
	if len(left) == 0 {
		return ""
	}
	var devices, fifos int
	names := make([]string, 0, min(len(left), leftOutShown))
	for i, l := range left {
		if l.Kind == LeftOutFIFO {
			fifos++
		} else {
			devices++
		}
		if i < leftOutShown {
			names = append(names, l.Name)
		}
	}
	if len(left) > leftOutShown {
		names = append(names, fmt.Sprintf("and %d more", len(left)-leftOutShown))
	}
	var what []string
	if devices > 0 {
		what = append(what, plural(devices, "device node", "device nodes"))
	}
	if fifos > 0 {
		what = append(what, plural(fifos, "FIFO", "FIFOs"))
	}
	return fmt.Sprintf("left out %s, never created from an image: %s; the guest's /dev is devtmpfs, with the kernel's own device nodes",
		strings.Join(what, " and "), strings.Join(names, ", "))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
