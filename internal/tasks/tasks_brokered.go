package tasks

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
)

// Brokers gives a session's guest what it uses a brokered credential
// with (broker.Broker does): the deployment CA it trusts, and the
// placeholder it sends in the credential's place.
type Brokers interface {
	CACert(ctx context.Context) ([]byte, error)
	Placeholder(ctx context.Context, sid domain.SessionID, hostPort string) (string, error)
}

// Where a session with brokered credentials keeps what it uses them with.
const (
	brokerCAPath     = "/usr/local/share/ca-certificates/engrams-broker.crt"
	brokerBundlePath = "/etc/ssl/certs/ca-certificates.crt"
	githubHost       = "github.com:443"
	githubAPIHost    = "api.github.com:443"
)

// guestOps are the guest operations brokering uses (Tasks has them).
type guestOps interface {
	guestUpload(ctx context.Context, sid domain.SessionID, path string, mode uint32, body io.Reader) error
	guestRun(ctx context.Context, sid domain.SessionID, req guestapi.ExecRequest, limit int) (guestapi.ExecResult, error)
}

// brokeringStore is what brokering reads of the store.
type brokeringStore interface {
	GetSecretByName(ctx context.Context, org domain.OrgID, name string) (domain.Secret, error)
	GetSession(ctx context.Context, id domain.SessionID) (domain.Session, error)
}

// brokering is what tasks do for brokered credentials: grant them at
// create and ready the guest for them at setup.
type brokering struct {
	st      brokeringStore
	brokers Brokers // nil: nothing is brokered
	guest   guestOps
}

// grants are the credentials of spec's repos the broker puts in on their
// hosts, one per host, each with the repositories it serves and what the
// profile lets the guest do with each (fetch; push; the REST API).
// github.com brings api.github.com with the same credential when a
// repository there grants API use.
func (c brokering) grants(ctx context.Context, org domain.OrgID, spec apiv1.ProfileSpec) ([]domain.BrokeredGrant, error) {
	if c.brokers == nil {
		return nil, nil
	}
	var out []domain.BrokeredGrant
	for _, r := range spec.Repos {
		host, ok := domain.BrokeredHostOf(r.URL)
		if !ok || r.Credential == "" {
			continue
		}
		sec, err := c.st.GetSecretByName(ctx, org, r.Credential)
		if err != nil {
			return nil, fmt.Errorf("credential %s of %s: %w", r.Credential, r.URL, err)
		}
		i := slices.IndexFunc(out, func(g domain.BrokeredGrant) bool { return g.Host == host })
		if i < 0 {
			out = append(out, domain.BrokeredGrant{Host: host, SecretID: sec.ID})
			i = len(out) - 1
		} else if out[i].SecretID != sec.ID {
			return nil, fmt.Errorf("%w: repos on %s use two credentials; the broker puts one in per host", domain.ErrInvalid, host)
		}
		if p, ok := domain.BrokeredRepoPath(r.URL); ok {
			out[i].Access = addAccess(out[i].Access, domain.RepoAccess{Path: p, Push: r.Push, API: r.API})
		}
	}
	for _, g := range out {
		if g.Host == githubHost && slices.ContainsFunc(g.Access, func(a domain.RepoAccess) bool { return a.API }) &&
			!slices.ContainsFunc(out, func(o domain.BrokeredGrant) bool { return o.Host == githubAPIHost }) {
			out = append(out, domain.BrokeredGrant{Host: githubAPIHost, SecretID: g.SecretID, Access: g.Access})
		}
	}
	return out, nil
}

// addAccess adds a to list; a repository listed twice (cloned at two
// paths) gets what either grants.
func addAccess(list []domain.RepoAccess, a domain.RepoAccess) []domain.RepoAccess {
	i := slices.IndexFunc(list, func(o domain.RepoAccess) bool { return o.Path == a.Path })
	if i < 0 {
		return append(list, a)
	}
	list[i].Push, list[i].API = list[i].Push || a.Push, list[i].API || a.API
	return list
}

// install readies a session's guest for its brokered credentials: the
// deployment CA in its trust store (the system bundle, and
// NODE_EXTRA_CA_CERTS's file), and git told to send each host's
// placeholder (system config, so every user's git does). The real
// credentials never enter the guest. hosts are those readied (none: the
// session brokers nothing).
func (c brokering) install(ctx context.Context, sid domain.SessionID) (hosts []string, err error) {
	s, err := c.st.GetSession(ctx, sid)
	if err != nil {
		return nil, fmt.Errorf("get session: %w", err)
	}
	if len(s.Spec.Brokered) == 0 || c.brokers == nil {
		return nil, nil
	}
	ca, err := c.brokers.CACert(ctx)
	if err != nil {
		return nil, fmt.Errorf("broker CA: %w", err)
	}
	if err := c.guest.guestUpload(ctx, sid, brokerCAPath, 0o644, bytes.NewReader(ca)); err != nil {
		return nil, fmt.Errorf("install the broker CA in the session: %w", err)
	}
	script := `set -e; mkdir -p "$(dirname "$2")"; touch "$2"; grep -q "$(sed -n 2p "$1")" "$2" || cat "$1" >>"$2"; shift 2
while [ $# -gt 0 ]; do git config --system --replace-all "http.https://$1/.extraHeader" "$2" 2>/dev/null || true; shift 2; done`
	argv := []string{"/bin/sh", "-c", script, "sh", brokerCAPath, brokerBundlePath}
	for _, g := range s.Spec.Brokered {
		ph, err := c.brokers.Placeholder(ctx, sid, g.Host)
		if err != nil {
			return nil, fmt.Errorf("broker placeholder for %s: %w", g.Host, err)
		}
		argv = append(argv, strings.TrimSuffix(g.Host, ":443"),
			"Authorization: Basic "+base64.StdEncoding.EncodeToString([]byte("x-access-token:"+ph)))
		hosts = append(hosts, g.Host)
	}
	res, err := c.guest.guestRun(ctx, sid, guestapi.ExecRequest{Argv: argv, TimeoutMS: int64(time.Minute / time.Millisecond)}, 64<<10)
	if err != nil {
		return nil, fmt.Errorf("configure brokered credentials in the session: %w", err)
	}
	if res.ExitCode != 0 || res.Error != "" {
		return nil, fmt.Errorf("configure brokered credentials in the session: exit %d %s: %s", res.ExitCode, res.Error, bytes.TrimSpace(res.Stderr))
	}
	return hosts, nil
}

// tokenEnv is what the harness of session s sends gh-style API calls
// with: each brokered host's placeholder in the variables gh reads
// (GH_TOKEN and GITHUB_TOKEN for github.com; GH_ENTERPRISE_TOKEN,
// GITHUB_ENTERPRISE_TOKEN and GH_HOST for the first other host), unless
// the session's own env sets them. Placeholders are no secret: the broker
// puts the credential in only on the hosts granted it.
func (c brokering) tokenEnv(ctx context.Context, s domain.Session) (map[string]string, error) {
	if c.brokers == nil || len(s.Spec.Brokered) == 0 {
		return nil, nil
	}
	env := map[string]string{}
	set := func(k, v string) {
		if _, own := s.Spec.Env[k]; !own {
			env[k] = v
		}
	}
	enterprise := false
	for _, g := range s.Spec.Brokered {
		if g.Host == githubAPIHost || (g.Host != githubHost && enterprise) {
			continue
		}
		ph, err := c.brokers.Placeholder(ctx, s.ID, g.Host)
		if err != nil {
			return nil, fmt.Errorf("broker placeholder for %s: %w", g.Host, err)
		}
		if g.Host == githubHost {
			set("GH_TOKEN", ph)
			set("GITHUB_TOKEN", ph)
			continue
		}
		enterprise = true
		set("GH_ENTERPRISE_TOKEN", ph)
		set("GITHUB_ENTERPRISE_TOKEN", ph)
		set("GH_HOST", strings.TrimSuffix(g.Host, ":443"))
	}
	return env, nil
}

// brokeredEnv is what a session's harness is given for brokered
// credentials: Node's extra CA file.
func brokeredEnv(spec domain.SessionSpec) map[string]string {
	if len(spec.Brokered) == 0 {
		return nil
	}
	return map[string]string{"NODE_EXTRA_CA_CERTS": brokerCAPath}
}
