package profiles

import (
	"fmt"
	"slices"
	"strings"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
)

// The network terms of a receipt. A session's egress is served and
// enforced in the VM's network path on qemu; firecracker attaches no
// network device yet (its guests reach nothing); the process backend
// enforces nothing. Every host line says how the guest reaches it.

// vmBackends serve and enforce egress; everyBackend keeps real secrets
// out of the guest (they never reach a host at all).
func vmBackends() []string { return []string{apiv1.BackendQEMU} }

func everyBackend() []string {
	return []string{apiv1.BackendQEMU, apiv1.BackendFirecracker, apiv1.BackendProcess}
}

// receiptEnforcement says what each backend enforces.
func receiptEnforcement() []apiv1.ReceiptEnforcement {
	return []apiv1.ReceiptEnforcement{
		{Backend: apiv1.BackendQEMU, Enforced: true, How: "in the VM's network path: the VM's only network device is a TAP in a network " +
			"namespace of its own with no route out; its TCP goes to the host's egress proxy and its DNS to the host's filtering resolver, " +
			"everything else (other UDP, ICMP, IPv6) is dropped; names not listed here and private, loopback and link-local addresses are refused"},
		{Backend: apiv1.BackendFirecracker, Enforced: true, How: "no network at all: the firecracker backend attaches no network device yet, " +
			"so its guests reach none of the hosts this receipt lists (the same per-VM namespace around Firecracker's TAP device is the plan)"},
		{Backend: apiv1.BackendProcess, Enforced: false, How: "nothing is enforced: the guest is a process on the host's own network; " +
			"HTTP_PROXY and HTTPS_PROXY point its tools at an egress proxy on the host's loopback serving this allowlist, " +
			"and a tool that ignores them reaches whatever the host can"},
	}
}

// brokeredHost is a host a profile credential is for.
type brokeredHost struct {
	host   string
	secret domain.Secret
}

// brokeredNote says how the guest uses a git credential on its host:
// what the broker lets through, and with what a GitHub App's token is
// minted for the guest.
func brokeredNote(k *repoKey) string {
	if k.brokered == "" {
		return ""
	}
	note := "; the guest's git requests to " + k.brokered + " carry a placeholder, which the credential broker swaps for it there and " +
		"nowhere else (on qemu), for git fetches of " + strings.Join(k.paths, ", ")
	if len(k.push) > 0 {
		note += ", pushes to " + strings.Join(k.push, ", ")
	}
	if len(k.api) > 0 {
		note += ", and REST API calls for " + strings.Join(k.api, ", ") + " (reads; with push, pull requests, issues, comments, statuses, " +
			"check runs, git refs and contents)"
	}
	note += "; every other request there is refused"
	if k.secret.Kind == apiv1.SecretGitHubApp {
		note += "; the broker mints the guest's tokens with contents:read (write for repos it may push to) and metadata:read" +
			", plus pull_requests and issues for repos it may call the API for"
	}
	return note
}

// Why the guest reaches a host the way it does.
const (
	viaProxyReason = "directly, through the egress proxy: the filtering resolver answers the name, the proxy checks it against the SNI " +
		"or Host, resolves it itself and dials only an address it checked (never a private or loopback one), and passes TLS through " +
		"untouched (the guest verifies the server; no credential is added)"
	brokeredReason = "through the egress proxy to the coordinator's credential broker, which terminates TLS (the guest trusts the " +
		"deployment's CA, which signs only the hosts the broker serves), verifies the upstream's certificate, drops what credential the guest " +
		"sent and adds %s's secret in place of the session's placeholder; a placeholder anywhere else is refused"
)

// receiptHosts lists the hosts the profile, its harness and its
// credentials name, and how the guest reaches each: the model providers
// through the gateway, the hosts of git credentials brokered by the egress
// proxy, the harness's and the profile's egress directly through it.
func receiptHosts(spec *apiv1.ProfileSpec, d guestapi.HarnessDescriptor, keys []modelKey, brokered []brokeredHost) []apiv1.ReceiptHost {
	var out []apiv1.ReceiptHost
	seen := map[string]bool{}
	add := func(h apiv1.ReceiptHost) {
		if h.Host == "" || seen[h.Host] {
			return
		}
		seen[h.Host] = true
		h.Reachable, h.Enforced, h.EnforcedOn = true, true, vmBackends()
		out = append(out, h)
	}
	direct := append(slices.Clone(d.Hosts), spec.Egress...)
	for _, k := range keys {
		h := hostOf(k.meta.BaseURL)
		reason := "only through the model gateway, which adds the key outside the guest and forwards to " + k.meta.BaseURL
		if slices.Contains(direct, h) {
			reason += "; also directly, through the egress proxy (TLS passed through, no key added)"
		}
		add(apiv1.ReceiptHost{Host: h, Why: fmt.Sprintf("model provider of credential %s (%s)", k.secret.Name, k.secret.Kind),
			Via: apiv1.ViaGateway, Reason: reason})
	}
	for _, b := range brokered {
		add(apiv1.ReceiptHost{Host: b.host, Why: fmt.Sprintf("host of credential %s (%s)", b.secret.Name, b.secret.Kind),
			Via: apiv1.ViaBrokered, Reason: fmt.Sprintf(brokeredReason, b.secret.Name)})
	}
	for _, h := range d.Hosts {
		add(apiv1.ReceiptHost{Host: h, Why: "named by harness " + d.Name, Via: apiv1.ViaProxy, Reason: viaProxyReason})
	}
	for _, h := range spec.Egress {
		add(apiv1.ReceiptHost{Host: h, Why: "listed in the profile's egress", Via: apiv1.ViaProxy, Reason: viaProxyReason})
	}
	return out
}

// brokeredPower says what the guest may do with the repositories whose
// credential the broker puts in ("" when none is brokered).
func brokeredPower(repos []apiv1.ProfileRepo) string {
	var fetch, push, api []string
	for _, r := range repos {
		if _, ok := domain.BrokeredHostOf(r.URL); !ok || r.Credential == "" {
			continue
		}
		fetch = append(fetch, r.Path)
		if r.Push {
			push = append(push, r.Path)
		}
		if r.API {
			api = append(api, r.Path)
		}
	}
	if len(fetch) == 0 {
		return ""
	}
	s := "through the credential broker, git-fetches " + strings.Join(fetch, ", ")
	if len(push) > 0 {
		s += ", pushes to " + strings.Join(push, ", ")
	}
	if len(api) > 0 {
		s += ", calls the host's REST API for " + strings.Join(api, ", ")
	}
	return s + "; nothing else with their credentials"
}

// receiptPowers says in plain sentences what a task can do.
func receiptPowers(spec *apiv1.ProfileSpec, gateway bool) []string {
	p := []string{
		"runs as root in its own VM, shared with nothing else",
		"runs any command in that VM, with the harness acting on its own",
	}
	if len(spec.Repos) == 0 {
		p = append(p, "gets no repositories")
	} else {
		paths := make([]string, 0, len(spec.Repos))
		for _, r := range spec.Repos {
			paths = append(paths, r.Path)
		}
		p = append(p, "reads and writes its own clones of the repositories ("+strings.Join(paths, ", ")+"); git logins stay outside the guest")
	}
	if s := brokeredPower(spec.Repos); s != "" {
		p = append(p, s)
	}
	if gateway {
		p = append(p, "uses the model keys without seeing them: the model gateway adds them to its requests")
	}
	return append(p, "reaches only the hosts this receipt lists, each as its line says: no other name resolves and no other connection "+
		"leaves the VM (enforced on qemu; firecracker guests get no network yet; the process backend enforces nothing)")
}
