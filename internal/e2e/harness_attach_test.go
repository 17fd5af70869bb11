package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/blob/localdir"
	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/harness"
	"github.com/engrams/engrams/internal/image/imagetest"
)

// registerHarness builds the built-in shell harness, puts its bundle into
// the env's blobs and registers it (what `engrams harness build` will do),
// under name with libc as its requirement.
func registerHarness(t *testing.T, e *imageEnv, name, libc string) domain.Harness {
	t.Helper()
	b, err := harness.New(harness.Config{OutDir: t.TempDir(), CacheDir: t.TempDir()}, harness.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := b.BuildBuiltin(context.Background(), harness.BuiltinSpec{Name: harness.BuiltinShell})
	if err != nil {
		t.Fatal(err)
	}
	bs, err := localdir.New(localdir.Config{Dir: e.blobs}, localdir.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := chunk.New(chunk.Config{ChunkSize: chunk.DiskChunkSize}, chunk.Deps{Blob: bs})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	man, _, err := cs.PutFile(context.Background(), bundle.Path)
	if err != nil {
		t.Fatal(err)
	}
	d := bundle.Descriptor
	d.Name, d.Requires = name, guestapi.HarnessRequires{Libc: libc}
	desc, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(man)
	h, err := e.st.PutHarness(context.Background(), domain.Harness{ID: name + "-" + d.Version, Name: name, Version: d.Version,
		Descriptor: desc, Manifest: raw, Digest: bundle.Digest, CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestHarnessAttachedToImageSessions: sessions restored from an image's
// harness-free base get the harness they name mounted at /.engrams-harness
// (its descriptor readable there, its script runnable), keep it across a
// suspend and resume, and a harness needing another C library than the
// image's is refused at once.
func TestHarnessAttachedToImageSessions(t *testing.T) {
	t.Parallel()
	requireQEMU(t)
	reg := imagetest.StartRegistry(t, imagetest.RegistryOptions{})
	reg.Push(t, "small/alpine", "3", imagetest.AlpineLike(t))
	e := startImageEnv(t)
	e.startQEMUHost(t)
	if _, job := e.enable(t, apiv1.EnableImageRequest{Ref: reg.Ref("small/alpine", "3"), Name: "alpine", MemoryMiB: 256, DiskGiB: 1}); job.State != "ready" {
		t.Fatalf("enable: %+v", job)
	}
	registerHarness(t, e, "shell", guestapi.LibcNone)
	registerHarness(t, e, "needs-glibc", guestapi.LibcGlibc)
	ctx := context.Background()

	_, err := e.c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{Image: "alpine", Harness: "needs-glibc"}}, true)
	if err == nil || !strings.Contains(err.Error(), "needs glibc, the image has musl") {
		t.Fatalf("a glibc harness on a musl image: %v, want refused at once saying why", err)
	}
	s, err := e.c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{Image: "alpine", Harness: "shell"}}, true)
	if err != nil || s.State != "active" {
		t.Fatalf("create with a harness: %+v %v", s, err)
	}
	check := func(when string) {
		t.Helper()
		got := run(t, e.c, s.ID, `grep -c '"name": *"shell"' `+guestapi.HarnessMountPoint+`/`+guestapi.HarnessDescriptorFile+`; echo hi | sh `+guestapi.HarnessMountPoint+`/`+harness.ShellEntrypoint+` | grep -c '"ready"'`)
		if got != "1\n1" {
			t.Fatalf("%s: harness in the guest: %q", when, got)
		}
	}
	check("after create")
	if got, err := e.c.Sessions().Suspend(ctx, s.ID, true); err != nil || got.State != "idle" {
		t.Fatalf("suspend: %+v %v", got, err)
	}
	check("after resume")
	plain, err := e.c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{Image: "alpine"}}, true)
	if err != nil || plain.State != "active" {
		t.Fatalf("create without a harness: %+v %v", plain, err)
	}
	if got := run(t, e.c, plain.ID, "ls -A "+guestapi.HarnessMountPoint+" | wc -l"); got != "0" {
		t.Fatalf("a session without a harness sees %s entries at %s", got, guestapi.HarnessMountPoint)
	}
}
