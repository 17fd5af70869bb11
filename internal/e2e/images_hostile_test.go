package e2e

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/image/imagetest"
)

// TestImageDebootstrapDevicesLeftOut enables what `docker import` makes of a
// debootstrap tree (one layer, "./" names, an empty config, /dev with device
// nodes, a FIFO in /run): the job is ready with a warning naming what was left
// out, `image get` shows it, and a session starts from the image on QEMU, whose
// /dev is the guest kernel's devtmpfs.
func TestImageDebootstrapDevicesLeftOut(t *testing.T) {
	t.Parallel()
	requireQEMU(t)
	reg := imagetest.StartRegistry(t, imagetest.RegistryOptions{})
	reg.Push(t, "imported/debian", "12", imagetest.DebootstrapLike(t))
	e := startImageEnv(t)
	e.startQEMUHost(t)
	_, job := e.enable(t, apiv1.EnableImageRequest{Ref: reg.Ref("imported/debian", "12"), Name: "deboot",
		MemoryMiB: 256, DiskGiB: 1, Warmup: "echo warmed > /warm"})
	want := "left out 9 device nodes and 1 FIFO, never created from an image: " +
		strings.Join(imagetest.DebootstrapLeftOut(), ", ") + "; the guest's /dev is devtmpfs"
	if job.State != apiv1.ImageJobReady || len(job.Warnings) != 1 || !strings.HasPrefix(job.Warnings[0], want) {
		t.Fatalf("job %s (%s) with warnings %q, want ready with one starting %q", job.State, job.Error, job.Warnings, want)
	}
	img, err := e.c.Images().Get(context.Background(), "deboot")
	if err != nil || img.LastJob == nil || !slices.Equal(img.LastJob.Warnings, job.Warnings) {
		t.Fatalf("image get: %+v, %v; want the job's warnings", img.LastJob, err)
	}
	s, err := e.c.Sessions().Create(context.Background(), apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{Image: "deboot"}}, true)
	if err != nil || s.State != "active" {
		t.Fatalf("session: %+v %v", s, err)
	}
	got := run(t, e.c, s.ID, "cat /warm /etc/debian_version; "+
		"[ -c /dev/null ] && [ -c /dev/console ] && echo devices; "+
		"grep -q '^devtmpfs /dev devtmpfs' /proc/mounts && echo devtmpfs; "+
		"[ -e /run/initctl ] || echo no-fifo")
	if want := "warmed\n12.8\ndevices\ndevtmpfs\nno-fifo"; got != want {
		t.Fatalf("in the guest:\n%s\nwant:\n%s", got, want)
	}
}

// TestImageEnableRefusesBombs: a gzip bomb and a layer of 2 million entries
// fail their jobs early with an error naming the bound, and leave nothing in the
// materializer's work dir. (internal/image measures the disk they take.)
func TestImageEnableRefusesBombs(t *testing.T) {
	t.Parallel()
	reg := imagetest.StartRegistry(t, imagetest.RegistryOptions{})
	reg.Push(t, "bomb/zeros", "1", imagetest.Bomb(t, imagetest.BombZeroFiles, 16<<30))
	reg.Push(t, "bomb/huge", "1", imagetest.Bomb(t, imagetest.BombHugeFile, 16<<30))
	reg.Push(t, "bomb/entries", "1", imagetest.ManyEntries(t, 2_000_000, imagetest.Whiteouts))
	e := startImageEnv(t) // no host: nothing gets as far as a capture
	for _, c := range []struct{ repo, want string }{
		{"bomb/zeros", "more than 100 times as much plus 256 MiB (a decompression bomb); the image is refused"},
		{"bomb/huge", "takes the tree past 4227858432 bytes of files; the image is refused (all a 4 GiB root disk has room for"},
		{"bomb/entries", "more than 1000000 entries; the image is refused"},
	} {
		_, job := e.enable(t, apiv1.EnableImageRequest{Ref: reg.Ref(c.repo, "1")})
		if job.State != apiv1.ImageJobFailed || !strings.Contains(job.Error, c.want) || job.Attempts != 1 {
			t.Errorf("%s: job %s after %d attempts with %q, want failed at once with %q", c.repo, job.State, job.Attempts, job.Error, c.want)
		}
		t.Logf("%s: %s", c.repo, job.Error)
	}
	left, err := os.ReadDir(e.workDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range left {
		if strings.HasPrefix(l.Name(), "materialize-") {
			t.Errorf("work dir keeps %s", l.Name())
		}
	}
}
