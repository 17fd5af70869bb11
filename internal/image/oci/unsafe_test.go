package oci

import (
	"bytes"
	"compress/gzip"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// outsideDir is a directory outside every target, standing in for the host's /etc:
// a broken guard would write into it, which the tests see.
func outsideDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	if err := os.WriteFile(filepath.Join(d, "sentinel"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

func assertOutsideUntouched(t *testing.T, d string) {
	t.Helper()
	ents, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "sentinel" {
		t.Errorf("outside dir now holds %v", ents)
	}
	if b, err := os.ReadFile(filepath.Join(d, "sentinel")); err != nil || string(b) != "host" {
		t.Errorf("sentinel: %q, %v", b, err)
	}
}

// hostEtcProbe is written through a symlink to the real /etc by a broken guard.
const hostEtcProbe = "engrams-oci-test-must-not-exist"

func TestPullRefusesUnsafeLayers(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, nil)
	out := outsideDir(t)
	tests := []struct {
		name   string
		layers [][]ent
		entry  string // the error must name it
	}{
		{"dot-dot entry", [][]ent{{file("../escape", "x", 0o644)}}, "../escape"},
		{"dot-dot deeper", [][]ent{{file("a/../../escape", "x", 0o644)}}, "a/../../escape"},
		{"dot-dot that stays inside", [][]ent{{file("a/../b", "x", 0o644)}}, "a/../b"},
		{"absolute name", [][]ent{{file(out+"/abs", "x", 0o644)}}, out + "/abs"},
		{"symlink to /etc, then a file through it",
			[][]ent{{symlink("etc", "/etc"), file("etc/"+hostEtcProbe, "x", 0o644)}}, "etc/" + hostEtcProbe},
		{"symlink outside, then a file through it",
			[][]ent{{symlink("evil", out), file("evil/passwd", "x", 0o644)}}, "evil/passwd"},
		{"symlink in one layer, a file through it in the next",
			[][]ent{{symlink("evil", out)}, {file("evil/passwd", "x", 0o644)}}, "evil/passwd"},
		{"directory through a symlink",
			[][]ent{{symlink("evil", out)}, {dir("evil/sub/", 0o755)}}, "evil/sub/"},
		{"symlink inside the root, then a file through it",
			[][]ent{{dir("real/", 0o755), symlink("lnk", "real"), file("lnk/f", "x", 0o644)}}, "lnk/f"},
		{"relative symlink climbing out", [][]ent{{symlink("a/esc", "../../outside")}}, "a/esc"},
		{"hard link to ../outside", [][]ent{{hardlink("hl", "../outside/sentinel")}}, "hl"},
		{"hard link to an absolute path", [][]ent{{hardlink("hl", out+"/sentinel")}}, "hl"},
		{"hard link through a symlink",
			[][]ent{{symlink("evil", out), hardlink("hl", "evil/sentinel")}}, "hl"},
		{"hard link to a missing file", [][]ent{{hardlink("hl", "nothing")}}, "hl"},
		{"whiteout through a symlink",
			[][]ent{{symlink("evil", out)}, {whiteout("evil/.wh.sentinel")}}, "evil/.wh.sentinel"},
		{"opaque directory through a symlink",
			[][]ent{{symlink("evil", out)}, {whiteout("evil/.wh..wh..opq")}}, "evil/.wh..wh..opq"},
		{"whiteout of ..", [][]ent{{dir("a/", 0o755), whiteout("a/.wh...")}}, "a/.wh..."},
		{"file over the root", [][]ent{{file(".", "x", 0o644)}}, "."},
		{"line break in a name", [][]ent{{file("etc/bad\nname", "x", 0o644)}}, `etc/bad\nname`},
		{"carriage return in a name", [][]ent{{dir("etc/bad\rdir/", 0o755)}}, `etc/bad\rdir/`},
		{"symlink to a target with a line break", [][]ent{{symlink("lnk", "a\nb")}}, "lnk"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var layers []v1.Layer
			layers = append(layers, layer(t, file("bin/sh", "sh", 0o755)))
			for _, ents := range tc.layers {
				layers = append(layers, layer(t, ents...))
			}
			ref, _ := push(t, host, "evil"+string(rune('a'+i))+":v1", image(t, "amd64", v1.Config{}, layers...))
			_, err, target, parent := pullTo(t, newPuller(), ref, Credentials{})
			t.Logf("err: %v", err)
			if !errors.Is(err, ErrUnsafeLayer) {
				t.Fatalf("err %v, want ErrUnsafeLayer", err)
			}
			if !strings.Contains(err.Error(), `"`+tc.entry+`"`) {
				t.Errorf("error %q does not name the entry %q", err, tc.entry)
			}
			assertGone(t, target, parent)
			if _, err := os.Lstat("/etc/" + hostEtcProbe); err == nil {
				t.Errorf("/etc/%s was written on the host", hostEtcProbe)
			}
		})
	}
	t.Cleanup(func() { assertOutsideUntouched(t, out) })
}

// corruptBlob serves the blob with the given digest through edit.
func corruptBlob(digest string, edit func([]byte) []byte) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/blobs/"+digest) {
				h.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			body := edit(rec.Body.Bytes())
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.Header().Del("Content-Length")
			w.WriteHeader(rec.Code)
			_, _ = w.Write(body)
		})
	}
}

// switchable routes requests to the handler set after the images are pushed.
type switchable struct {
	mu   sync.Mutex
	wrap func(http.Handler) http.Handler
}

func (s *switchable) set(w func(http.Handler) http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wrap = w
}

func (s *switchable) handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		wrap := s.wrap
		s.mu.Unlock()
		if wrap != nil {
			wrap(h).ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestPullRefusesCorruptLayers(t *testing.T) {
	t.Parallel()
	shell := layer(t, file("bin/sh", "sh", 0o755))
	good := layer(t, file("data", strings.Repeat("payload ", 4096), 0o644))
	other := layer(t, file("other", "a different blob", 0o644))
	gz := gzipBytes(t, tarBytes(t, file("data", strings.Repeat("z", 100000), 0o644)))
	goodDigest, err := good.Digest()
	if err != nil {
		t.Fatal(err)
	}
	otherBlob := func([]byte) []byte {
		b, _ := compressedBytes(t, other)
		return b
	}
	flip := func(b []byte) []byte {
		c := bytes.Clone(b)
		c[len(c)/2] ^= 0x40
		return c
	}
	tests := []struct {
		name  string
		layer v1.Layer
		serve func(http.Handler) http.Handler // nil: as pushed
		fix   func(*testing.T, v1.Image) v1.Image
		want  string
	}{
		{"flipped byte in the stored blob", good, corruptBlob(goodDigest.String(), flip), nil, "digest"},
		{"another blob served", good, corruptBlob(goodDigest.String(), otherBlob), nil, "Content-Length"},
		{"config diff_id does not match", good, nil, wrongDiffID, "diff_id"},
		{"not a tar stream", static.NewLayer([]byte("not a tar at all"), types.OCIUncompressedLayer), nil, nil, "tar"},
		{"not gzip after the magic", static.NewLayer([]byte("\x1f\x8bgarbage"), types.OCILayer), nil, nil, "gzip"},
		{"truncated gzip", static.NewLayer(gz[:len(gz)/2], types.OCILayer), nil, nil, "corrupt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sw := &switchable{}
			host := newRegistry(t, sw.handler)
			img := image(t, "amd64", v1.Config{}, shell, tc.layer)
			if tc.fix != nil {
				img = tc.fix(t, img)
			}
			ref, _ := push(t, host, "corrupt:v1", img)
			sw.set(tc.serve)
			_, err, target, parent := pullTo(t, newPuller(), ref, Credentials{})
			t.Logf("err: %v", err)
			if !errors.Is(err, ErrCorruptLayer) || errors.Is(err, ErrUnsafeLayer) {
				t.Fatalf("err %v, want ErrCorruptLayer", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "layer 2/2") {
				t.Errorf("error %q does not say %q about layer 2/2", err, tc.want)
			}
			assertGone(t, target, parent)
		})
	}
}

func compressedBytes(t *testing.T, l v1.Layer) ([]byte, error) {
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(rc)
	return buf.Bytes(), err
}

// wrongDiffID gives the last layer the diff_id of an empty tar.
func wrongDiffID(t *testing.T, img v1.Image) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.RootFS.DiffIDs[len(cf.RootFS.DiffIDs)-1] = v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
