package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/image/imagetest"
)

// TestImageEnableRefusals: bad references, wrong credentials, a corrupt
// layer, malicious layers and an image without /bin/sh each fail their job
// with a clear error, leave the image without a base snapshot (sessions
// are refused) and leave nothing in the materializer's work dir.
func TestImageEnableRefusals(t *testing.T) {
	t.Parallel()
	reg := imagetest.StartRegistry(t, imagetest.RegistryOptions{Auth: imagetest.BasicAuth, Username: "ci", Password: "pw"})
	good := &apiv1.RegistryAuth{Username: "ci", Password: "pw"}
	reg.Push(t, "ok/busybox", "1", imagetest.Busybox(t))
	reg.Push(t, "bad/noshell", "1", imagetest.NoShell(t))
	corrupt := imagetest.Busybox(t)
	reg.Push(t, "bad/corrupt", "1", corrupt)
	reg.CorruptBlob(t, imagetest.LayerDigests(t, corrupt)[0])
	type tc struct {
		name string
		req  apiv1.EnableImageRequest
		want string
	}
	cases := []tc{
		{"unknown tag", apiv1.EnableImageRequest{Ref: reg.Ref("ok/busybox", "nope"), Credentials: good}, "not found"},
		{"unknown repository", apiv1.EnableImageRequest{Ref: reg.Ref("ok/missing", "1"), Credentials: good}, "not found"},
		{"wrong password", apiv1.EnableImageRequest{Ref: reg.Ref("ok/busybox", "1"), Name: "wrongpw", Credentials: &apiv1.RegistryAuth{Username: "ci", Password: "nope"}}, "unauthorized"},
		{"no credentials", apiv1.EnableImageRequest{Ref: reg.Ref("ok/busybox", "1"), Name: "anon"}, "unauthorized"},
		{"corrupt layer", apiv1.EnableImageRequest{Ref: reg.Ref("bad/corrupt", "1"), Credentials: good}, "corrupt layer"},
		{"no shell", apiv1.EnableImageRequest{Ref: reg.Ref("bad/noshell", "1"), Credentials: good}, "/bin/sh"},
	}
	for _, kind := range imagetest.MaliciousKinds() {
		repo := "bad/" + strings.ReplaceAll(strings.ToLower(string(kind)), "_", "-")
		reg.Push(t, repo, "1", imagetest.Malicious(t, kind))
		cases = append(cases, tc{"malicious " + string(kind), apiv1.EnableImageRequest{Ref: reg.Ref(repo, "1"), Credentials: good}, "unsafe layer"})
	}
	e := startImageEnv(t) // no host: every case fails before a capture
	for _, c := range cases {
		_, job := e.enable(t, c.req)
		if job.State != "failed" || !strings.Contains(strings.ToLower(job.Error), c.want) {
			t.Errorf("%s: job %s with %q, want failed with %q", c.name, job.State, job.Error, c.want)
			continue
		}
		if strings.Contains(job.Error, "pw") && c.req.Credentials != nil && strings.Contains(job.Error, c.req.Credentials.Password) {
			t.Errorf("%s: the error shows the password: %q", c.name, job.Error)
		}
		img, err := e.c.Images().Get(context.Background(), job.ImageID)
		if err != nil || img.State != "failed" || img.BaseSnapshotID != "" {
			t.Errorf("%s: image %+v %v, want failed without a base", c.name, img, err)
			continue
		}
		_, err = e.c.Sessions().Create(context.Background(), apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{Image: img.Name}}, true)
		if err == nil || !strings.Contains(err.Error(), "failed") {
			t.Errorf("%s: session from a failed image: %v", c.name, err)
		}
		t.Logf("%s: %s", c.name, job.Error)
	}
	left, _ := os.ReadDir(e.workDir)
	var names []string
	for _, l := range left {
		names = append(names, l.Name())
	}
	if slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "materialize-") }) {
		t.Fatalf("work dir %s keeps %v after failed jobs", e.workDir, names)
	}
}

// TestImageSmallImagesRunOnQEMU enables busybox, a multi-layer image with
// whiteouts and opaque directories, and a musl image, and runs commands in
// sessions started from each.
func TestImageSmallImagesRunOnQEMU(t *testing.T) {
	t.Parallel()
	requireQEMU(t)
	reg := imagetest.StartRegistry(t, imagetest.RegistryOptions{})
	reg.Push(t, "small/busybox", "1", imagetest.Busybox(t))
	reg.Push(t, "small/layers", "1", imagetest.MultiLayer(t))
	reg.Push(t, "small/alpine", "3", imagetest.AlpineLike(t))
	e := startImageEnv(t)
	e.startQEMUHost(t)
	for _, name := range []string{"busybox", "layers", "alpine"} {
		ref := map[string]string{"busybox": reg.Ref("small/busybox", "1"), "layers": reg.Ref("small/layers", "1"), "alpine": reg.Ref("small/alpine", "3")}[name]
		if _, err := e.c.Images().Enable(context.Background(), apiv1.EnableImageRequest{Ref: ref, Name: name, MemoryMiB: 256, DiskGiB: 1, Warmup: "echo " + name + " > /warm"}); err != nil {
			t.Fatal(err)
		}
	}
	session := func(name string) string {
		t.Helper()
		img, err := e.c.Images().Get(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		job, err := e.c.Images().WaitJob(context.Background(), img.LastJob.ID, 100e6, nil)
		if err != nil || job.State != "ready" {
			t.Fatalf("image %s: job %+v %v", name, job, err)
		}
		s, err := e.c.Sessions().Create(context.Background(), apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{Image: name}}, true)
		if err != nil || s.State != "active" {
			t.Fatalf("session of %s: %+v %v", name, s, err)
		}
		if got := run(t, e.c, s.ID, "cat /warm"); got != name {
			t.Fatalf("%s: /warm is %q", name, got)
		}
		return s.ID
	}
	if got := run(t, e.c, session("busybox"), "busybox | head -1"); !strings.Contains(got, "BusyBox") {
		t.Fatalf("busybox: %q", got)
	}
	checkTree(t, e, session("layers"), imagetest.MultiLayerTree())
	alpine := session("alpine")
	if got := run(t, e.c, alpine, imagetest.MuslHello); got+"\n" != imagetest.MuslHelloOutput {
		t.Fatalf("musl program printed %q", got)
	}
	if got := run(t, e.c, alpine, "cat /etc/alpine-release"); got+"\n" != imagetest.AlpineRelease {
		t.Fatalf("alpine-release %q", got)
	}
	img, err := e.c.Images().Get(context.Background(), "alpine")
	if err != nil || img.Config.Libc != "musl" {
		t.Fatalf("alpine image libc: %+v %v", img.Config, err)
	}

	// A host joining later prefetches the ready images and reports them.
	second := credentials(t, e.st, "img-host-2")
	e.startQEMUHostAs(t, second)
	eventually(t, 120*time.Second, "the second host holds every image's base", func() (bool, string) {
		var not []string
		for _, name := range []string{"busybox", "layers", "alpine"} {
			img, err := e.c.Images().Get(context.Background(), name)
			if err != nil || !slices.Contains(img.ReadyHosts, second.HostID) {
				not = append(not, fmt.Sprintf("%s: %v %v", name, img.ReadyHosts, err))
			}
		}
		return len(not) == 0, strings.Join(not, "; ")
	})
}

// checkTree checks the facts of a flattened tree inside session id.
func checkTree(t *testing.T, e *imageEnv, id string, f imagetest.TreeFacts) {
	t.Helper()
	var script strings.Builder
	for p, body := range f.Files {
		fmt.Fprintf(&script, "[ \"$(cat '/%s')\" = '%s' ] || echo 'file /%s';", p, strings.TrimRight(body, "\n"), p)
	}
	for p, target := range f.Symlinks {
		fmt.Fprintf(&script, "[ \"$(readlink '/%s')\" = '%s' ] || echo 'link /%s';", p, target, p)
	}
	for _, d := range f.Dirs {
		fmt.Fprintf(&script, "[ -d '/%s' ] || echo 'dir /%s';", d, d)
	}
	for _, a := range f.Absent {
		fmt.Fprintf(&script, "[ -e '/%s' ] || [ -L '/%s' ] && echo 'present /%s';", a, a, a)
	}
	script.WriteString("true")
	if bad := run(t, e.c, id, script.String()); bad != "" {
		t.Fatalf("flattened tree in the guest differs:\n%s", bad)
	}
}
