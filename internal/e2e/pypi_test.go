package e2e

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/image/imagetest"
	"github.com/engrams/engrams/internal/testutil"
)

// TestPipDownloadFromQEMUGuest (issue 14): Debian's pip in a QEMU guest
// downloads a package from an index on an allowed name (pypi.test, HTTPS
// with a certificate from the test CA), through the filtering resolver and
// the transparent proxy; the wheel arrives byte for byte. The same
// download from a session whose allowlist lacks the index fails.
func TestPipDownloadFromQEMUGuest(t *testing.T) {
	t.Parallel()
	requireQEMU(t)
	ca := testutil.NewCA(t)
	pypi := startPyPI(t, ca, "pypi.test")
	_, authAddr := startAuthority(t, map[string]string{"pypi.test.": "127.0.0.1"})
	reg := imagetest.StartRegistry(t, imagetest.RegistryOptions{})
	reg.Push(t, "team/debian-pip", "12", imagetest.DebianWith(t, "python3-pip"))
	e := startImageEnv(t)
	dir := shortTempDir(t)
	startHostProcess(t, e.r.URL, e.creds.HostToken, dir, "--backend", "qemu", "--blob-dir", e.blobs,
		"--egress-dns", authAddr, "--egress-allow", "127.0.0.1:"+pypi.port)
	t.Cleanup(func() {
		for _, pid := range vmmPIDs(dir) {
			_ = exec.Command("kill", "-9", fmt.Sprint(pid)).Run()
		}
	})
	waitHostReady(t, e.c, e.creds.HostID)
	if _, job := e.enable(t, apiv1.EnableImageRequest{Ref: reg.Ref("team/debian-pip", "12"), Name: "debian-pip", MemoryMiB: 512, DiskGiB: 2}); job.State != "ready" {
		t.Fatalf("enable: %+v", job)
	}
	ctx := context.Background()
	pip := "pip download --no-deps --no-cache-dir --disable-pip-version-check --retries 0 --timeout 15 --cert /tmp/ca.pem " +
		"--index-url https://pypi.test:" + pypi.port + "/simple/ -d /tmp/dl demo==1.0 2>&1; echo pip-exit=$?; sha256sum /tmp/dl/" + pypiWheel
	for _, tt := range []struct {
		name   string
		egress []string
		want   []string
	}{
		{"the index allowed", []string{"pypi.test:" + pypi.port}, []string{"Successfully downloaded demo", "pip-exit=0", pypi.sum}},
		{"the index not allowed", []string{"other.test:443"}, []string{"pip-exit=1"}},
	} {
		s, err := e.c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{Image: "debian-pip", Egress: tt.egress}}, true)
		if err != nil || s.State != "active" {
			t.Fatalf("%s: create: %+v %v (host log %s)", tt.name, s, err, hostLog(dir))
		}
		if err := e.c.Files().Put(ctx, s.ID, "/tmp/ca.pem", 0o644, bytes.NewReader(ca.PEM())); err != nil {
			t.Fatalf("upload the test CA: %v", err)
		}
		before := pypi.hits.Load()
		var out, errb bytes.Buffer
		if _, err := e.c.Sessions().Exec(ctx, s.ID, apiv1.ExecRequest{Argv: []string{"sh", "-c", pip}, TimeoutMS: 180000}, &out, &errb); err != nil {
			t.Fatalf("%s: exec pip: %v", tt.name, err)
		}
		for _, w := range tt.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: pip download printed %q, want %q in it", tt.name, out.String(), w)
			}
		}
		if got := pypi.hits.Load() - before; (got > 0) != (tt.egress[0] == "pypi.test:"+pypi.port) {
			t.Errorf("%s: the index got %d requests", tt.name, got)
		}
	}
}

// fakePyPI is a package index (PEP 503's simple API) serving one pure
// Python wheel, demo 1.0, over TLS for name with a certificate from ca.
type fakePyPI struct {
	port  string
	wheel []byte
	sum   string // the wheel's sha256, hex
	hits  atomic.Int64
}

const pypiWheel = "demo-1.0-py3-none-any.whl"

func startPyPI(t *testing.T, ca *testutil.CA, name string) *fakePyPI {
	t.Helper()
	p := &fakePyPI{wheel: buildWheel(t)}
	s := sha256.Sum256(p.wheel)
	p.sum = hex.EncodeToString(s[:])
	mux := http.NewServeMux()
	mux.HandleFunc("GET /simple/demo/", func(w http.ResponseWriter, r *http.Request) {
		p.hits.Add(1)
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"/files/%s#sha256=%s\">%s</a></body></html>\n", pypiWheel, p.sum, pypiWheel)
	})
	mux.HandleFunc("GET /files/"+pypiWheel, func(w http.ResponseWriter, r *http.Request) {
		p.hits.Add(1)
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(p.wheel)
	})
	srv := ca.TLSServer(t, mux, name)
	_, p.port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	return p
}

// buildWheel is demo 1.0 as a wheel: a module and its dist-info.
func buildWheel(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	files := [][2]string{
		{"demo/__init__.py", "VERSION = '1.0'\n"},
		{"demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\nSummary: a package served by the e2e tests' index\n"},
		{"demo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: engrams-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record bytes.Buffer
	for _, f := range files {
		w, err := zw.Create(f[0])
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(f[1]))
		fmt.Fprintf(&record, "%s,,\n", f[0])
	}
	fmt.Fprintf(&record, "demo-1.0.dist-info/RECORD,,\n")
	w, err := zw.Create("demo-1.0.dist-info/RECORD")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write(record.Bytes())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
