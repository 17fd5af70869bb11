package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/store"
)

// putHarness registers a harness that needs libc, with a made-up bundle manifest.
func putHarness(t *testing.T, e *env, name, version, libc string) store.Harness {
	t.Helper()
	d := guestapi.HarnessDescriptor{Format: guestapi.HarnessDescriptorFormat, Name: name, Version: version, Entrypoint: []string{"bin/agent"},
		Protocol: guestapi.HarnessProtocolShell, Requires: guestapi.HarnessRequires{Libc: libc}}
	desc, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	h, err := e.st.PutHarness(context.Background(), store.Harness{ID: name + "-" + version, Name: name, Version: version,
		Descriptor: desc, Manifest: json.RawMessage(`{"version":2,"chunk_size":4194304,"size":1,"chunks":["zero"]}`),
		Digest: "sha256:" + name + version, CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHarnessSessions(t *testing.T) {
	t.Parallel()
	imgs := &fakeImages{digests: map[string]string{"reg/app:1": "sha256:h"}} // a musl image
	e := newEnvWith(t, Config{PlacementWait: 300 * time.Millisecond}, Deps{Images: imgs})
	hostID, h := e.addHost(t, "a", 8)
	e.keepAlive(t, hostID)
	ctx := context.Background()
	_, job, err := e.co.EnableImage(ctx, EnableImageRequest{Ref: "reg/app:1"})
	if err != nil {
		t.Fatal(err)
	}
	if job = waitJob(t, e, job.ID); job.State != store.JobReady {
		t.Fatalf("job %+v", job)
	}
	putHarness(t, e, "glibc-agent", "1.0", guestapi.LibcGlibc)
	putHarness(t, e, "static-agent", "1.0", guestapi.LibcNone)
	static2 := putHarness(t, e, "static-agent", "2.0", guestapi.LibcNone)

	refused := []struct {
		name string
		spec hostlink.MachineSpec
		want string
	}{
		{"glibc harness on a musl image", hostlink.MachineSpec{Image: "app", Harness: "glibc-agent"}, "needs glibc, the image has musl"},
		{"glibc harness on the default root", hostlink.MachineSpec{Harness: "glibc-agent@1.0"}, "default root image"},
		{"unknown harness", hostlink.MachineSpec{Harness: "nope"}, "no harness nope is registered"},
		{"unknown version", hostlink.MachineSpec{Harness: "static-agent@9"}, "no harness static-agent@9"},
		{"bad name", hostlink.MachineSpec{Harness: "a/b"}, "want NAME or NAME@VERSION"},
	}
	for _, tc := range refused {
		if _, err := e.co.CreateSession(ctx, tc.spec, ""); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid with %q", tc.name, err, tc.want)
		}
	}

	s, err := e.co.CreateSession(ctx, hostlink.MachineSpec{Image: "app", Harness: "static-agent"}, "")
	if err != nil {
		t.Fatal(err)
	}
	e.wait(t, s.ID, lifecycle.Active)
	h.mu.Lock()
	last := h.starts[len(h.starts)-1]
	h.mu.Unlock()
	if last.Spec.HarnessID != static2.ID || string(last.Harness) != string(static2.Manifest) || last.Restore == nil || !last.Restore.Base {
		t.Fatalf("start request %+v: want the newest static-agent's bundle with the base restore", last)
	}

	// A host that cannot attach harness disks is passed over, saying why.
	noHarness := testFacts
	noHarness.Backend.Harness = false
	otherID, _ := e.addHostWith(t, "b", 8, noHarness)
	e.keepAlive(t, otherID)
	if err := e.st.SetHostState(ctx, hostID, store.HostLost); err != nil {
		t.Fatal(err)
	}
	s2, err := e.co.CreateSession(ctx, hostlink.MachineSpec{Harness: "static-agent@1.0"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := e.wait(t, s2.ID, lifecycle.Dead); !strings.Contains(got.Reason, "cannot attach a harness bundle") {
		t.Fatalf("reason %q", got.Reason)
	}
}
