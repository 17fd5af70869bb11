package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// rawLayer is a gzip layer of raw, an uncompressed stream (a tar with anything after it).
func rawLayer(t *testing.T, raw []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func files(prefix string, n int) []ent {
	out := make([]ent, n)
	for i := range out {
		out[i] = file(fmt.Sprintf("%s/f%03d", prefix, i), "", 0o644)
	}
	return out
}

func paxRecords(n, size int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("SCHILY.xattr.user.k%03d", i)] = strings.Repeat("v", size)
	}
	return m
}

type boundCase struct {
	name   string
	layers func(t *testing.T) []v1.Layer // above a first layer with bin/sh
	cfg    Limits                        // the Puller's
	req    Limits                        // the request's
	want   error                         // nil: the pull succeeds
	limit  string                        // the LimitError's, for ErrTooLarge
}

func boundCases() []boundCase {
	ents := func(e ...ent) func(t *testing.T) []v1.Layer {
		return func(t *testing.T) []v1.Layer { return []v1.Layer{layer(t, e...)} }
	}
	raw := func(tail int) func(t *testing.T) []v1.Layer {
		return func(t *testing.T) []v1.Layer {
			return []v1.Layer{rawLayer(t, append(tarBytes(t, file("x", "x", 0o644)), make([]byte, tail)...))}
		}
	}
	longLink := symlink("l", strings.Repeat("a/", 2100))
	paxMany, paxBig := file("many", "", 0o644), file("big", "", 0o644)
	paxMany.pax, paxBig.pax = paxRecords(65, 1), paxRecords(1, 65<<10)
	// 3 inodes below: bin, bin/sh, d (the first layer's), then the files.
	return []boundCase{
		{"entries: one more than allowed", ents(files("d", 9)...), Limits{Entries: 9}, Limits{}, ErrTooLarge, "Entries"},
		{"entries: exactly as many", ents(files("d", 8)...), Limits{Entries: 9}, Limits{}, nil, ""},
		{"inodes: one more than allowed", ents(files("d", 10)...), Limits{}, Limits{Inodes: 12}, ErrTooLarge, "Inodes"},
		{"inodes: exactly as many", ents(files("d", 9)...), Limits{}, Limits{Inodes: 12}, nil, ""},
		{"inodes freed by a whiteout count again", func(t *testing.T) []v1.Layer {
			return []v1.Layer{layer(t, files("d", 9)...), layer(t, whiteout(".wh.d")), layer(t, files("e", 9)...)}
		}, Limits{}, Limits{Inodes: 12}, nil, ""},
		{"inodes freed by replacements and opaque dirs count again", func(t *testing.T) []v1.Layer {
			return []v1.Layer{layer(t, files("d", 9)...), layer(t, files("d", 9)...),
				layer(t, append(files("d", 3), whiteout("d/.wh..wh..opq"))...), layer(t, files("e", 5)...)}
		}, Limits{}, Limits{Inodes: 13}, nil, ""},
		{"tree bytes: a header past the bound", ents(file("big", strings.Repeat("x", 100), 0o644)), Limits{}, Limits{TreeBytes: 50}, ErrTooLarge, "TreeBytes"},
		{"tree bytes: exactly the bound", ents(file("big", strings.Repeat("x", 48), 0o644)), Limits{}, Limits{TreeBytes: 50}, nil, ""},
		{"stream bytes: zeros after the archive", raw(4 << 20), Limits{StreamBytes: 2 << 20}, Limits{}, ErrTooLarge, "StreamBytes"},
		{"expansion: zeros after the archive", raw(32 << 20), Limits{Expansion: 10, ExpansionSlack: 1 << 20}, Limits{}, ErrTooLarge, "Expansion"},
		{"expansion: a file of zeros", ents(file("zeros", string(make([]byte, 32<<20)), 0o644)),
			Limits{Expansion: 10, ExpansionSlack: 1 << 20}, Limits{}, ErrTooLarge, "Expansion"},
		{"expansion: within the slack", raw(1 << 20), Limits{Expansion: 10, ExpansionSlack: 2 << 20}, Limits{}, nil, ""},
		{"declared layer sizes past the stream bound", ents(file("x", "x", 0o644)), Limits{}, Limits{StreamBytes: 64}, ErrTooLarge, "StreamBytes"},
		{"layers: more than allowed", func(t *testing.T) []v1.Layer {
			return []v1.Layer{layer(t, file("a", "a", 0o644)), layer(t, file("b", "b", 0o644))}
		}, Limits{Layers: 2}, Limits{}, ErrTooLarge, "Layers"},
		{"config larger than allowed", ents(file("a", "a", 0o644)), Limits{ConfigBytes: 100}, Limits{}, ErrTooLarge, "ConfigBytes"},
		{"name longer than PATH_MAX", ents(file(strings.Repeat("d/", 2048)+"f", "", 0o644)), Limits{}, Limits{}, ErrUnsafeLayer, ""},
		{"name component longer than NAME_MAX", ents(file(strings.Repeat("n", 256), "", 0o644)), Limits{}, Limits{}, ErrUnsafeLayer, ""},
		{"link target longer than PATH_MAX", ents(longLink), Limits{}, Limits{}, ErrUnsafeLayer, ""},
		{"too many PAX records", ents(paxMany), Limits{}, Limits{}, ErrUnsafeLayer, ""},
		{"too much metadata", ents(paxBig), Limits{}, Limits{}, ErrUnsafeLayer, ""},
	}
}

// Every bound stops the pull with its own error, and the tree is removed; a layer
// exactly at a bound passes.
func TestPullBounds(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, nil)
	for i, tc := range boundCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			layers := append([]v1.Layer{layer(t, file("bin/sh", "sh", 0o755))}, tc.layers(t)...)
			ref, _ := push(t, host, fmt.Sprintf("bound%d:v1", i), image(t, "amd64", v1.Config{}, layers...))
			p := New(Config{Limits: tc.cfg, SkipOwnership: !isRoot}, Deps{Dialer: loopback()})
			parent := t.TempDir()
			target := filepath.Join(parent, "rootfs")
			_, err := p.Pull(context.Background(), Request{Ref: ref, Target: target, Limits: tc.req})
			t.Logf("err: %v", err)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("pull: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			var lerr *LimitError
			if tc.limit != "" && (!errors.As(err, &lerr) || lerr.Limit != tc.limit || !strings.Contains(err.Error(), "the image is refused")) {
				t.Errorf("err %v, want a LimitError of %s", err, tc.limit)
			}
			assertGone(t, target, parent)
		})
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	d := DefaultLimits().complete()
	if d.TreeBytes != 4032<<20 || d.Inodes != 262133 || d.StreamBytes != 4032<<20+1_000_000*2048 {
		t.Errorf("defaults %+v", d)
	}
	if got := TreeLimits(4 << 30); got.TreeBytes != DefaultTreeBytes || got.Inodes != DefaultInodes {
		t.Errorf("TreeLimits(4 GiB) = %+v, want the defaults", got)
	}
	if got := TreeLimits(1 << 30); got.TreeBytes != 1008<<20 || got.Inodes != 65525 {
		t.Errorf("TreeLimits(1 GiB) = %+v", got)
	}
	o := Limits{Entries: 5}.Over(Limits{Entries: 7, Inodes: 3})
	if o.Entries != 7 || o.Inodes != 3 || o.TreeBytes != 0 {
		t.Errorf("Over = %+v", o)
	}
	c := Limits{TreeBytes: 10, Entries: 2}.complete()
	if c.StreamBytes != 10+2*streamBytesPerEntry || c.Inodes != DefaultInodes {
		t.Errorf("complete = %+v", c)
	}
}
