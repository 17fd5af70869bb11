package profiles

import (
	"fmt"
	"strings"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
)

// TestReceiptHosts: each host appears once, with how the guest reaches it
// (the first reason to reach it wins: a model key's gateway, then a git
// credential's broker, then the harness's and the profile's egress), and
// every one is enforced on the VM backends only.
func TestReceiptHosts(t *testing.T) {
	t.Parallel()
	ant := modelKey{secret: domain.Secret{Name: "ant", Kind: "anthropic_api_key"}, meta: apiv1.SecretMeta{BaseURL: "https://api.anthropic.com"}}
	gh := brokeredHost{host: "github.com", secret: domain.Secret{Name: "gh", Kind: "git_https"}}
	harness := guestapi.HarnessDescriptor{Name: "claude-code", Hosts: []string{"api.anthropic.com:443", "statsig.anthropic.com:443"}}
	tests := []struct {
		name     string
		egress   []string
		d        guestapi.HarnessDescriptor
		keys     []modelKey
		brokered []brokeredHost
		want     []string // host via, in order
	}{
		{name: "nothing", want: nil},
		{name: "egress only", egress: []string{"pypi.org", "*.npmjs.org:443"}, want: []string{"pypi.org proxy", "*.npmjs.org:443 proxy"}},
		{name: "harness hosts without its key", d: harness, want: []string{"api.anthropic.com:443 proxy", "statsig.anthropic.com:443 proxy"}},
		{name: "the key's provider is the gateway's", d: harness, keys: []modelKey{ant},
			want: []string{"api.anthropic.com:443 gateway", "statsig.anthropic.com:443 proxy"}},
		{name: "a credential's host is brokered, not direct", egress: []string{"github.com", "pypi.org"}, brokered: []brokeredHost{gh},
			want: []string{"github.com brokered", "pypi.org proxy"}},
		{name: "listed twice, once", d: harness, egress: []string{"statsig.anthropic.com:443"}, want: []string{"api.anthropic.com:443 proxy", "statsig.anthropic.com:443 proxy"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			hosts := receiptHosts(&apiv1.ProfileSpec{Egress: tt.egress}, tt.d, tt.keys, tt.brokered)
			var got []string
			for _, h := range hosts {
				got = append(got, h.Host+" "+h.Via)
				if !h.Reachable || !h.Enforced || fmt.Sprint(h.EnforcedOn) != "[qemu]" || h.Reason == "" || h.Why == "" {
					t.Errorf("%s: %+v, want reachable, enforced on qemu, with a reason", h.Host, h)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("hosts %v, want %v", got, tt.want)
			}
		})
	}
	hosts := receiptHosts(&apiv1.ProfileSpec{}, harness, []modelKey{ant}, nil)
	if !strings.Contains(hosts[0].Reason, "also directly, through the egress proxy") {
		t.Errorf("a gateway host the harness also names: %q", hosts[0].Reason)
	}
	if strings.Contains(receiptHosts(&apiv1.ProfileSpec{}, guestapi.HarnessDescriptor{}, []modelKey{ant}, nil)[0].Reason, "also directly") {
		t.Error("a gateway host nothing else names is said to be reachable directly")
	}
}

// TestReceiptEnforcement: the VM backends enforce, the process backend
// says it does not.
func TestReceiptEnforcement(t *testing.T) {
	t.Parallel()
	var got []string
	for _, e := range receiptEnforcement() {
		got = append(got, fmt.Sprintf("%s=%v", e.Backend, e.Enforced))
		if e.How == "" {
			t.Errorf("%s: no how", e.Backend)
		}
	}
	if fmt.Sprint(got) != "[qemu=true firecracker=true process=false]" {
		t.Errorf("enforcement %v", got)
	}
	if p := receiptEnforcement()[2].How; !strings.Contains(p, "nothing is enforced") || !strings.Contains(p, "HTTPS_PROXY") {
		t.Errorf("process: %q", p)
	}
}
