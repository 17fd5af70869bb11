package harnessreg

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/imagejobs"
	"github.com/engrams/engrams/internal/store"
)

// putHarness registers a harness that needs libc, with a made-up bundle manifest.
func putHarness(t *testing.T, e *env, name, version, libc string) domain.Harness {
	t.Helper()
	d := guestapi.HarnessDescriptor{Format: guestapi.HarnessDescriptorFormat, Name: name, Version: version, Entrypoint: []string{"bin/agent"},
		Protocol: guestapi.HarnessProtocolShell, Requires: guestapi.HarnessRequires{Libc: libc}, Hosts: []string{"api." + name + ".test:443"}}
	desc, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	h, err := e.st.PutHarness(context.Background(), domain.Harness{ID: name + "-" + version, Name: name, Version: version,
		Descriptor: desc, Manifest: json.RawMessage(`{"version":2,"chunk_size":4194304,"size":1,"chunks":["zero"]}`),
		Digest: "sha256:" + name + version, CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// env is a coordinator on fake hosts with images and this registry wired in.
type env struct {
	st store.Store
	co *coordinator.Coordinator
	im *imagejobs.Images
	*coordinatortest.Env
}

func newEnv(t *testing.T, placementWait time.Duration, m imagejobs.Materializer) *env {
	t.Helper()
	st, f := coordinatortest.NewStore(t), coordinatortest.NewFleet()
	im, err := imagejobs.New(imagejobs.Config{PlacementWait: placementWait},
		imagejobs.Deps{Store: st, Hosts: f, Place: coordinator.NewPlacement(st, 0, nil), Images: m})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := New(Config{}, Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ct := coordinatortest.Run(t, coordinator.Config{PlacementWait: placementWait}, st,
		coordinator.Deps{Store: st, Hosts: f, Images: im, Harnesses: reg}, f)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = im.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &env{st: st, co: ct.Co, im: im, Env: ct}
}

func TestHarnessSessions(t *testing.T) {
	t.Parallel()
	imgs := &coordinatortest.Materializer{Digests: map[string]string{"reg/app:1": "sha256:h"}} // a musl image
	e := newEnv(t, 300*time.Millisecond, imgs)
	hostID, h := e.AddHost(t, "a", 8)
	e.KeepAlive(t, hostID)
	ctx := context.Background()
	_, job, err := e.im.EnableImage(ctx, imagejobs.EnableImageRequest{Org: domain.FirstOrg, Ref: "reg/app:1"})
	if err != nil {
		t.Fatal(err)
	}
	if job = coordinatortest.WaitJob(t, e.st, job.ID); job.State != domain.JobReady {
		t.Fatalf("job %+v", job)
	}
	putHarness(t, e, "glibc-agent", "1.0", guestapi.LibcGlibc)
	putHarness(t, e, "static-agent", "1.0", guestapi.LibcNone)
	static2 := putHarness(t, e, "static-agent", "2.0", guestapi.LibcNone)

	refused := []struct {
		name string
		spec domain.SessionSpec
		want string
	}{
		{"glibc harness on a musl image", domain.SessionSpec{Owner: domain.Owner{OrgID: domain.FirstOrg}, Image: "app", Harness: "glibc-agent"}, "needs glibc, the image has musl"},
		{"glibc harness on the default root", domain.SessionSpec{Harness: "glibc-agent@1.0"}, "default root image"},
		{"unknown harness", domain.SessionSpec{Harness: "nope"}, "no harness nope is registered"},
		{"unknown version", domain.SessionSpec{Harness: "static-agent@9"}, "no harness static-agent@9"},
		{"bad name", domain.SessionSpec{Harness: "a/b"}, "want NAME or NAME@VERSION"},
	}
	for _, tc := range refused {
		if _, err := e.co.CreateSession(ctx, tc.spec, ""); !errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want domain.ErrInvalid with %q", tc.name, err, tc.want)
		}
	}

	s, err := e.co.CreateSession(ctx, domain.SessionSpec{Owner: domain.Owner{OrgID: domain.FirstOrg}, Image: "app", Harness: "static-agent", Egress: []string{"pypi.org"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"api.static-agent.test:443", "pypi.org"}; !slices.Equal(s.Spec.Egress, want) {
		t.Errorf("egress %q, want the request's and the harness's hosts %q", s.Spec.Egress, want)
	}
	e.Wait(t, s.ID, domain.SessionActive)
	h.Mu.Lock()
	last := h.Starts[len(h.Starts)-1]
	h.Mu.Unlock()
	if last.Spec.HarnessID != static2.ID || string(last.Harness) != string(static2.Manifest) || last.Restore == nil || !last.Restore.Base {
		t.Fatalf("start request %+v: want the newest static-agent's bundle with the base restore", last)
	}

	// A host that cannot attach harness disks is passed over, saying why.
	noHarness := coordinatortest.TestFacts
	noHarness.Backend.Harness = false
	otherID, _ := e.AddHostWith(t, "b", 8, noHarness)
	e.KeepAlive(t, otherID)
	if err := e.st.SetHostState(ctx, hostID, domain.HostLost); err != nil {
		t.Fatal(err)
	}
	s2, err := e.co.CreateSession(ctx, domain.SessionSpec{Harness: "static-agent@1.0"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Wait(t, s2.ID, domain.SessionDead); !strings.Contains(got.Reason, "cannot attach a harness bundle") {
		t.Fatalf("reason %q", got.Reason)
	}
}
