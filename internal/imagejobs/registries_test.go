package imagejobs

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/image/oci"
	"github.com/engrams/engrams/internal/netpolicy"
)

// TestEnableRefusesBlockedRegistries: a registry at a loopback or private
// address is refused at enable, saying the range and how to allow it,
// unless the operator allowed it; names are left to the dialer.
func TestEnableRefusesBlockedRegistries(t *testing.T) {
	t.Parallel()
	allow, err := netpolicy.ParseAllowances([]string{"127.0.0.1:5000", "10.0.0.0/8", "registry.lan"})
	if err != nil {
		t.Fatal(err)
	}
	strict := newEnvWith(t, Config{}, Deps{Images: &coordinatortest.Materializer{}})
	allowing := newEnvWith(t, Config{}, Deps{Images: &coordinatortest.Materializer{},
		Registries: netpolicy.NewGuard(netpolicy.GuardConfig{Allow: allow, BlockedPorts: []uint16{7700}})})
	tests := []struct {
		e    *env
		ref  string
		want string // "" accepted
	}{
		{strict, "127.0.0.1:5000/app:1", "127.0.0.1:5000 is blocked: loopback 127.0.0.0/8"},
		{strict, "localhost:5000/app:1", "localhost resolves only to blocked addresses"},
		{strict, "[::1]:5000/app:1", "loopback ::1/128"},
		{strict, "10.0.0.5/app:1", "10.0.0.5:443 is blocked: private 10.0.0.0/8"},
		{strict, "192.168.1.10:5000/team/app:1", "private 192.168.0.0/16"},
		{strict, "169.254.169.254/app:1", "link-local"},
		{strict, "registry.example.com/app:1", ""},
		{strict, "app:1", ""},
		{allowing, "127.0.0.1:5000/app:1", ""},
		{allowing, "127.0.0.1:5001/app:1", "loopback"},
		{allowing, "127.0.0.1:7700/app:1", "own services"},
		{allowing, "10.0.0.5:5000/app:1", ""},
		{allowing, "registry.lan:5000/app:1", ""},
		{allowing, "172.16.0.1/app:1", "private 172.16.0.0/12"},
	}
	for i, tt := range tests {
		_, _, err := tt.e.im.EnableImage(context.Background(), EnableImageRequest{Org: domain.FirstOrg, Ref: tt.ref, Name: "img" + string(rune('a'+i))})
		if tt.want == "" {
			if err != nil {
				t.Errorf("enable %s: %v", tt.ref, err)
			}
			continue
		}
		if !errors.Is(err, domain.ErrInvalid) || !errors.Is(err, netpolicy.ErrBlocked) || !strings.Contains(err.Error(), tt.want) ||
			!strings.Contains(err.Error(), "--allow-registry") {
			t.Errorf("enable %s: %v, want ErrInvalid naming %q and --allow-registry", tt.ref, err, tt.want)
		}
	}
	if _, _, err := strict.im.EnableImage(context.Background(), EnableImageRequest{Org: domain.FirstOrg, Ref: "[::1]/app:1", Name: "v6"}); !errors.Is(err, netpolicy.ErrBlocked) {
		t.Errorf("enable from [::1] without a port: %v", err)
	}
	if _, _, err := allowing.im.EnableImage(context.Background(), EnableImageRequest{Org: domain.FirstOrg, Ref: "127.0.0.1:70000/app:1", Name: "port"}); !errors.Is(err, domain.ErrInvalid) ||
		!strings.Contains(err.Error(), "not 1 to 65535") {
		t.Errorf("enable with port 70000: %v", err)
	}
	imgs, err := strict.st.ListImages(context.Background(), domain.FirstOrg)
	if err != nil || len(imgs) != 2 {
		t.Errorf("strict server stored %d images (%v), want the 2 on public registries", len(imgs), err)
	}
}

// blockedMaterializer is refused by its dialer at every resolve, as a
// registry name that resolves to a private address is.
type blockedMaterializer struct {
	*coordinatortest.Materializer
	resolves atomic.Int64
}

func (b *blockedMaterializer) Resolve(context.Context, string, oci.Credentials) (oci.Resolved, error) {
	b.resolves.Add(1)
	return oci.Resolved{}, &netpolicy.BlockedError{Host: "registry.example.com", Addr: netip.MustParseAddrPort("10.0.0.5:443"), Reason: "private 10.0.0.0/8"}
}

// TestImageJobFailsOnBlockedAddress: a name that resolves to a blocked
// address when the job pulls fails the job at once (no retry), saying how
// to allow the registry.
func TestImageJobFailsOnBlockedAddress(t *testing.T) {
	t.Parallel()
	m := &blockedMaterializer{Materializer: &coordinatortest.Materializer{}}
	e := newEnvWith(t, Config{}, Deps{Images: m})
	_, job, err := e.im.EnableImage(context.Background(), EnableImageRequest{Org: domain.FirstOrg, Ref: "registry.example.com/app:1"})
	if err != nil {
		t.Fatal(err)
	}
	job = waitJob(t, e, job.ID)
	if job.State != domain.JobFailed || !strings.Contains(job.Error, "registry.example.com resolves only to blocked addresses: 10.0.0.5:443 is private") ||
		!strings.Contains(job.Error, "--allow-registry") {
		t.Fatalf("job %+v", job)
	}
	if n := m.resolves.Load(); n != 1 {
		t.Errorf("resolved %d times, want once (a blocked address is not retried)", n)
	}
}
