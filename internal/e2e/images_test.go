package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/blob/localdir"
	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/harness"
	"github.com/engrams/engrams/internal/harnessreg"
	"github.com/engrams/engrams/internal/image"
	"github.com/engrams/engrams/internal/image/imagetest"
	"github.com/engrams/engrams/internal/modeltest"
	"github.com/engrams/engrams/internal/secret"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/store"
)

// imageEnv is a replica able to enable images (materializer over a local
// blob dir, an ephemeral secrets key) and a client; hosts share blobs.
type imageEnv struct {
	st      store.Store
	r       replica
	c       *client.Client
	creds   server.Credentials
	blobs   string
	workDir string
}

func startImageEnv(t *testing.T, opts ...func(*server.Config, *server.Deps)) *imageEnv {
	t.Helper()
	st := openSQLite(t)
	creds := credentials(t, st, "img-host")
	blobs := t.TempDir()
	bs, err := localdir.New(localdir.Config{Dir: blobs}, localdir.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	m, closeM, err := image.NewForBlobStore(bs, work, loopbackGuard(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeM)
	sealer, err := secret.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hb, err := harness.New(harness.Config{OutDir: t.TempDir(), CacheDir: filepath.Join(modeltest.CacheDir(), "harness-npm")}, harness.Deps{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	hc, err := chunk.New(chunk.Config{ChunkSize: chunk.DiskChunkSize}, chunk.Deps{Blob: bs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hc.Close)
	cfg := server.Config{
		Coordinator: coordinator.Config{HeartbeatInterval: 500 * time.Millisecond, HostLostAfter: 30 * time.Second},
		Harnesses:   harnessreg.Config{WorkDir: t.TempDir()}}
	deps := server.Deps{Images: m, Secrets: sealer, HarnessBuilder: hb, HarnessChunks: hc}
	for _, o := range opts {
		o(&cfg, &deps)
	}
	r := serveReplicaWith(t, ln, st, "", cfg, deps)
	return &imageEnv{st: st, r: r, c: newClient(r.URL, creds.Token), creds: creds, blobs: blobs, workDir: work}
}

// startQEMUHost starts a QEMU host agent sharing the env's blobs.
func (e *imageEnv) startQEMUHost(t *testing.T) string {
	t.Helper()
	return e.startQEMUHostAs(t, e.creds)
}

// startQEMUHostAs starts a QEMU host agent with creds.
func (e *imageEnv) startQEMUHostAs(t *testing.T, creds server.Credentials) string {
	t.Helper()
	dir := shortTempDir(t)
	startHostProcess(t, e.r.URL, creds.HostToken, dir, "--backend", "qemu", "--blob-dir", e.blobs)
	t.Cleanup(func() {
		for _, pid := range vmmPIDs(dir) {
			_ = exec.Command("kill", "-9", fmt.Sprint(pid)).Run()
		}
	})
	waitHostReady(t, e.c, creds.HostID)
	return dir
}

// enable enables ref and waits for its job to finish.
func (e *imageEnv) enable(t *testing.T, req apiv1.EnableImageRequest) (apiv1.ImageJobResponse, apiv1.ImageJob) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	resp, err := e.c.Images().Enable(ctx, req)
	if err != nil {
		t.Fatalf("enable %s: %v", req.Ref, err)
	}
	job, err := e.c.Images().WaitJob(ctx, resp.Job.ID, 100*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("wait for job of %s: %v", req.Ref, err)
	}
	return resp, job
}

// run execs script in session id and returns its trimmed stdout.
func run(t *testing.T, c *client.Client, id, script string) string {
	t.Helper()
	var out, errb bytes.Buffer
	code, err := c.Sessions().Exec(context.Background(), id, apiv1.ExecRequest{Argv: []string{"/bin/sh", "-c", script}, TimeoutMS: 60000}, &out, &errb)
	if err != nil || code != 0 {
		t.Fatalf("exec %q in %s: code %d, %v, stderr %q", script, id, code, err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// TestImageDebianWarmBaseSnapshot enables a debootstrap'd Debian image with a
// warm-up, then starts two sessions from its base snapshot: both see the
// warm-up's file, neither booted a kernel (their console logs are empty of
// a boot and they share the base's boot id), each has its own env and
// copy-on-write disk.
func TestImageDebianWarmBaseSnapshot(t *testing.T) {
	t.Parallel()
	requireQEMU(t)
	reg := imagetest.StartRegistry(t, imagetest.RegistryOptions{Auth: imagetest.BasicAuth, Username: "ci", Password: "pw"})
	ref := reg.Ref("team/debian", "12")
	reg.Push(t, "team/debian", "12", imagetest.Debian(t))
	e := startImageEnv(t)
	hostDir := e.startQEMUHost(t)

	resp, job := e.enable(t, warmDebianRequest(ref, "debian"))
	img := checkWarmDebianEnabled(t, e, reg, resp, job)

	ids := make([]string, 2)
	for i := range ids {
		s, err := e.c.Sessions().Create(context.Background(), apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{
			Image: "debian", Env: map[string]string{"WHO": fmt.Sprint("s", i)}}}, true)
		if err != nil || s.State != "active" {
			t.Fatalf("create from image: %+v %v", s, err)
		}
		ids[i] = s.ID
	}
	checkRestoredFromWarmBase(t, e, hostDir, ids)
	run(t, e.c, ids[0], "echo mine > /own")
	if got := run(t, e.c, ids[1], "cat /own 2>/dev/null || echo absent"); got != "absent" {
		t.Fatalf("a write in one session shows in another: %q", got)
	}

	// Enabling the same digest again (another name) reuses the base.
	_, again := e.enable(t, warmDebianRequest(ref, "debian-again"))
	if again.State != "ready" || again.StagesMS["pull"] != 0 || again.StagesMS["boot"] != 0 {
		t.Fatalf("re-enable of a ready digest did work again: %+v", again)
	}

	refreshRebuiltDebian(t, e, reg, img, ids[0])
}

// warmDebianRequest enables ref as name with a warm-up writing /warm, a
// workdir, an env and the registry's credentials.
func warmDebianRequest(ref, name string) apiv1.EnableImageRequest {
	return apiv1.EnableImageRequest{Ref: ref, Name: name, Warmup: "echo warmed > /warm", Workdir: "/root",
		Env: map[string]string{"TEAM": "infra"}, Credentials: &apiv1.RegistryAuth{Username: "ci", Password: "pw"}}
}

// checkWarmDebianEnabled checks the enable job went through every stage and
// the image is ready with a base snapshot, glibc, and its credentials named
// without the password; it returns the image.
func checkWarmDebianEnabled(t *testing.T, e *imageEnv, reg *imagetest.Registry, resp apiv1.ImageJobResponse, job apiv1.ImageJob) apiv1.Image {
	t.Helper()
	if job.State != "ready" {
		t.Fatalf("enable job %s: %s (tail %q)", job.State, job.Error, job.OutputTail)
	}
	for _, stage := range []string{"resolve", "pull", "rootfs", "chunks", "boot", "warmup", "snapshot", "upload"} {
		if _, ok := job.StagesMS[stage]; !ok {
			t.Errorf("job stages %v lack %s", job.StagesMS, stage)
		}
	}
	img, err := e.c.Images().Get(context.Background(), "debian")
	if err != nil || img.State != "ready" || img.Config.Libc != "glibc" || img.BaseSnapshotID == "" || img.Credentials != "ci@"+reg.Host() {
		t.Fatalf("image %+v %v", img, err)
	}
	if strings.Contains(fmt.Sprint(img), "pw") || resp.Image.Credentials == "" {
		t.Fatalf("the registry password shows in the image: %+v", img)
	}
	return img
}

// checkRestoredFromWarmBase checks each session sees the warm-up's file,
// the image's workdir and env with its own, and glibc, booted no kernel,
// and shares the others' boot id: all were restored from one base.
func checkRestoredFromWarmBase(t *testing.T, e *imageEnv, hostDir string, ids []string) {
	t.Helper()
	var boots []string
	for i, id := range ids {
		if got := run(t, e.c, id, "cat /warm; pwd"); got != "warmed\n/root" {
			t.Fatalf("session %d: /warm is %q", i, got)
		}
		if got := run(t, e.c, id, `echo "$TEAM $WHO $ENGRAMS_SESSION_ID"`); got != fmt.Sprintf("infra s%d %s", i, id) {
			t.Fatalf("session %d env: %q", i, got)
		}
		if got := run(t, e.c, id, "ldd --version | head -1"); !strings.Contains(got, "GLIBC") && !strings.Contains(got, "GNU libc") {
			t.Fatalf("session %d is not the Debian image: %q", i, got)
		}
		boots = append(boots, run(t, e.c, id, "cat /proc/sys/kernel/random/boot_id"))
		if log, _ := os.ReadFile(filepath.Join(hostDir, "machines", id, "serial.log")); bytes.Contains(log, []byte("Linux version")) {
			t.Fatalf("session %d booted a kernel: %s", i, log)
		}
	}
	if boots[0] != boots[1] {
		t.Fatalf("sessions have boot ids %v: not restored from one base", boots)
	}
}

// refreshRebuiltDebian pushes a rebuilt image under the same tag: refresh
// enables the new digest (with a base other than img's); the running session
// keeps its own, new sessions get the new one.
func refreshRebuiltDebian(t *testing.T, e *imageEnv, reg *imagetest.Registry, img apiv1.Image, running string) {
	t.Helper()
	reg.Push(t, "team/debian", "12", imagetest.DebianPlus(t, map[string]string{"etc/engrams-rebuilt": "v2\n"}))
	ctx := context.Background()
	ref2, err := e.c.Images().Refresh(ctx, "debian")
	if err != nil {
		t.Fatal(err)
	}
	job2, err := e.c.Images().WaitJob(ctx, ref2.Job.ID, 100*time.Millisecond, nil)
	if err != nil || job2.State != "ready" {
		t.Fatalf("refresh: %+v %v", job2, err)
	}
	img2, err := e.c.Images().Get(ctx, "debian")
	if err != nil || img2.Digest == img.Digest || img2.BaseSnapshotID == img.BaseSnapshotID {
		t.Fatalf("refresh kept digest %s / base %s: %+v %v", img.Digest, img.BaseSnapshotID, img2, err)
	}
	s3, err := e.c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{Image: "debian"}}, true)
	if err != nil || s3.State != "active" {
		t.Fatalf("create after refresh: %+v %v", s3, err)
	}
	if got := run(t, e.c, s3.ID, "cat /etc/engrams-rebuilt; cat /warm"); got != "v2\nwarmed" {
		t.Fatalf("new session after refresh sees %q", got)
	}
	if got := run(t, e.c, running, "cat /etc/engrams-rebuilt 2>/dev/null || echo old; cat /own"); got != "old\nmine" {
		t.Fatalf("running session after refresh sees %q", got)
	}
}
