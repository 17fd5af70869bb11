package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/imagejobs"
	"github.com/engrams/engrams/internal/netpolicy"
	"github.com/engrams/engrams/internal/server"
)

type noHosts struct{}

func (noHosts) Transport(context.Context, domain.HostID) (http.RoundTripper, error) {
	return nil, context.Canceled
}

// TestServerRegistryPolicy: a replica refuses to enable images from a
// loopback or private registry unless its Deps allow that registry.
func TestServerRegistryPolicy(t *testing.T) {
	t.Parallel()
	allow, err := netpolicy.ParseAllowances([]string{"127.0.0.1:5000", "10.1.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		regs  imagejobs.Registries
		ref   string
		allow bool
	}{
		{"default refuses loopback", nil, "127.0.0.1:5000/app:1", false},
		{"default refuses 10/8", nil, "10.1.2.3/app:1", false},
		{"default refuses localhost", nil, "localhost:5000/app:1", false},
		{"default takes a public name", nil, "registry.example.com/app:1", true},
		{"allowed address", netpolicy.NewGuard(netpolicy.GuardConfig{Allow: allow}), "127.0.0.1:5000/app:1", true},
		{"allowed prefix", netpolicy.NewGuard(netpolicy.GuardConfig{Allow: allow}), "10.1.2.3/app:1", true},
		{"outside the allowance", netpolicy.NewGuard(netpolicy.GuardConfig{Allow: allow}), "10.2.0.1/app:1", false},
		{"dev's loopback", netpolicy.NewGuard(netpolicy.GuardConfig{Allow: netpolicy.LoopbackAllowances()}), "localhost:5000/app:1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := openSQLite(t)
			p, err := server.Assemble(server.Config{ReplicaID: "r1"},
				server.Deps{Store: st, Images: &coordinatortest.Materializer{}, Registries: tt.regs}, noHosts{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = p.Images.EnableImage(context.Background(), imagejobs.EnableImageRequest{Org: domain.FirstOrg, Ref: tt.ref})
			if tt.allow {
				if err != nil {
					t.Fatalf("enable %s: %v", tt.ref, err)
				}
				return
			}
			if !errors.Is(err, domain.ErrInvalid) || !errors.Is(err, netpolicy.ErrBlocked) || !strings.Contains(err.Error(), "--allow-registry") {
				t.Fatalf("enable %s: %v, want a refusal saying how to allow it", tt.ref, err)
			}
		})
	}
}
