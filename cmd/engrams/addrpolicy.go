package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/engrams/engrams/internal/netpolicy"
)

// policyFlags are the operator's exceptions to the address policy for
// what the coordinator dials itself: image registries and model
// providers at loopback or private addresses.
type policyFlags struct {
	allowRegistry []string
	allowModelURL []string
	allowGitHost  []string
	allowIntegURL []string
}

func (f *policyFlags) register(fs *pflag.FlagSet) {
	fs.StringSliceVar(&f.allowRegistry, "allow-registry", envList("ALLOW_REGISTRY"),
		"also enable images from the registry at this loopback or private HOST[:PORT], IP or CIDR (repeatable, or comma-separated; by default only public addresses)")
	fs.StringSliceVar(&f.allowModelURL, "allow-model-url", envList("ALLOW_MODEL_URL"),
		"also let model secrets' base URLs point at this loopback or private URL, HOST[:PORT], IP or CIDR (repeatable, or comma-separated; by default only public addresses)")
	fs.StringSliceVar(&f.allowGitHost, "allow-git-host", envList("ALLOW_GIT_HOST"),
		"also let the credential broker reach a repository's git host at this loopback or private HOST[:PORT], IP or CIDR (repeatable, or comma-separated; by default only public addresses)")
	fs.StringSliceVar(&f.allowIntegURL, "allow-integration-url", envList("ALLOW_INTEGRATION_URL"),
		"also let integrations (Slack, GitHub, Linear) call an api_url at this loopback or private URL, HOST[:PORT], IP or CIDR (repeatable, or comma-separated; by default only public addresses)")
}

// envList is $ENGRAMS_<name> split at commas.
func envList(name string) []string {
	var out []string
	for _, s := range strings.Split(os.Getenv("ENGRAMS_"+name), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// addrPolicy is the Guard for registries, the one for model providers,
// the one for the credential broker's git hosts and the one for
// integrations' API calls.
type addrPolicy struct {
	registries, models, gitHosts, integrations *netpolicy.Guard
}

// guards builds the two Guards: the flags' allowances (loopback as well
// when dev), refusing this process's own ports on every address that is
// not public.
func (f *policyFlags) guards(dev bool, ownPorts []uint16, log *slog.Logger) (addrPolicy, error) {
	regs, err := netpolicy.ParseAllowances(f.allowRegistry)
	if err != nil {
		return addrPolicy{}, fmt.Errorf("--allow-registry: %w", err)
	}
	models, err := urlAllowances("--allow-model-url", f.allowModelURL)
	if err != nil {
		return addrPolicy{}, err
	}
	gits, err := netpolicy.ParseAllowances(f.allowGitHost)
	if err != nil {
		return addrPolicy{}, fmt.Errorf("--allow-git-host: %w", err)
	}
	integs, err := urlAllowances("--allow-integration-url", f.allowIntegURL)
	if err != nil {
		return addrPolicy{}, err
	}
	if dev {
		loop := netpolicy.LoopbackAllowances()
		regs, models, gits, integs = append(regs, loop...), append(models, loop...), append(gits, loop...), append(integs, loop...)
		log.Info("dev allows image registries, model base URLs, brokered git hosts and integrations' API URLs on this machine's loopback "+
			"(127.0.0.0/8, ::1, localhost); engrams server refuses them unless --allow-registry, --allow-model-url, --allow-git-host or "+
			"--allow-integration-url name them", "own_ports", ownPorts)
	}
	if len(f.allowRegistry) > 0 || len(f.allowModelURL) > 0 || len(f.allowGitHost) > 0 || len(f.allowIntegURL) > 0 {
		log.Info("address policy exceptions", "allow_registry", f.allowRegistry, "allow_model_url", f.allowModelURL, "allow_git_host", f.allowGitHost,
			"allow_integration_url", f.allowIntegURL)
	}
	guard := func(a []netpolicy.Allowance) *netpolicy.Guard {
		return netpolicy.NewGuard(netpolicy.GuardConfig{Allow: a, BlockedPorts: ownPorts})
	}
	return addrPolicy{registries: guard(regs), models: guard(models), gitHosts: guard(gits), integrations: guard(integs)}, nil
}

// urlAllowances reads a flag's entries, each a base URL or an allowance.
func urlAllowances(flag string, entries []string) ([]netpolicy.Allowance, error) {
	var out []netpolicy.Allowance
	for _, e := range entries {
		a, err := modelAllowance(e)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// modelAllowance reads a base URL ("http://10.0.0.7:8080/v1": its host and
// port) or an allowance (HOST[:PORT], IP, CIDR).
func modelAllowance(entry string) (netpolicy.Allowance, error) {
	if !strings.Contains(entry, "://") {
		return netpolicy.ParseAllowance(entry)
	}
	u, err := url.Parse(entry)
	if err != nil || u.Hostname() == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return netpolicy.Allowance{}, fmt.Errorf("%q: want an http(s) URL, HOST[:PORT], an IP or a CIDR", entry)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return netpolicy.ParseAllowance(net.JoinHostPort(u.Hostname(), port))
}

// ownPorts are the ports of this process's TCP listeners (nil ones skipped).
func ownPorts(lns ...net.Listener) []uint16 {
	var out []uint16
	for _, ln := range lns {
		if ln == nil {
			continue
		}
		if _, p, err := net.SplitHostPort(ln.Addr().String()); err == nil {
			if n, err := strconv.Atoi(p); err == nil && n > 0 && n < 65536 {
				out = append(out, uint16(n))
			}
		}
	}
	return out
}
