package integrations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// Store keeps integrations (the store).
type Store interface {
	PutIntegration(ctx context.Context, in domain.Integration) (domain.Integration, error)
	GetIntegration(ctx context.Context, kind domain.IntegrationKind) (domain.Integration, error)
	ListIntegrations(ctx context.Context, org domain.OrgID) ([]domain.Integration, error)
	DeleteIntegration(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind) error
}

// Sealer seals credentials at rest (secret.Sealer).
type Sealer interface {
	Seal(plaintext, associated []byte) ([]byte, error)
	Open(ciphertext, associated []byte) ([]byte, error)
}

// Hosts judges where integrations may call (a *netpolicy.Guard: the
// deployment's address policy, the operator's --allow-integration-url).
type Hosts interface {
	CheckHost(host string, port uint16) error
}

// Deps are the collaborators of a Service.
type Deps struct {
	Store  Store
	Sealer Sealer // nil: nothing can be added
	Hosts  Hosts  // nil: any api_url is taken (what dials it still judges)
	Now    func() time.Time
}

// Service configures integrations.
type Service struct {
	st    Store
	seal  Sealer
	hosts Hosts
	now   func() time.Time
}

// New returns a Service.
func New(deps Deps) (*Service, error) {
	if deps.Store == nil {
		return nil, errors.New("integrations: Store is required")
	}
	s := &Service{st: deps.Store, seal: deps.Sealer, hosts: deps.Hosts, now: deps.Now}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// spec is what one kind takes: its settings' keys, and its credentials,
// required or not.
type spec struct {
	config   []string
	required []string
	optional []string
}

var specs = map[domain.IntegrationKind]spec{
	domain.IntegrationSlack: {config: []string{"api_url", "channels", "default_profile", "dashboard_url", "socket_mode", "thread_users", "allow_external"},
		required: []string{"bot_token", "signing_secret"}, optional: []string{"app_token"}},
	domain.IntegrationGitHub: {config: []string{"api_url", "repos", "app_id", "installation_id", "dashboard_url"},
		optional: []string{"token", "private_key", "webhook_secret"}},
	domain.IntegrationLinear: {config: []string{"api_url", "team", "labels", "profile", "repo", "dashboard_url"},
		required: []string{"api_key", "webhook_secret"}},
}

// Kinds lists the kinds there are.
func Kinds() []domain.IntegrationKind {
	return []domain.IntegrationKind{domain.IntegrationGitHub, domain.IntegrationLinear, domain.IntegrationSlack}
}

// View is an integration as shown: settings, and the names of the
// credentials it holds (never their values).
type View struct {
	Kind      domain.IntegrationKind
	Config    json.RawMessage
	Secrets   []string
	UpdatedAt time.Time
}

// Add configures org's integration (again): config is its settings as a
// JSON object, secrets its credentials by name. There is one of a kind in
// the deployment: another organisation's is a conflict.
func (s *Service) Add(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind, config json.RawMessage, secrets map[string]string) (View, error) {
	if org == "" {
		return View{}, fmt.Errorf("%w: an integration is an organisation's", domain.ErrInvalid)
	}
	sp, ok := specs[kind]
	if !ok {
		return View{}, fmt.Errorf("%w: no integration %q (there are github, linear, slack)", domain.ErrInvalid, kind)
	}
	if s.seal == nil {
		return View{}, fmt.Errorf("%w: this server keeps no secrets, so it cannot keep %s's credentials (start it with --secrets-key-file)", domain.ErrInvalid, kind)
	}
	if err := checkConfig(kind, sp, config); err != nil {
		return View{}, err
	}
	if err := s.checkAPIURL(kind, config); err != nil {
		return View{}, err
	}
	if err := checkSecrets(kind, sp, secrets); err != nil {
		return View{}, err
	}
	plain, _ := json.Marshal(secrets)
	sealed, err := s.seal.Seal(plain, domain.SealedIntegration.AssociatedData(string(kind)))
	if err != nil {
		return View{}, fmt.Errorf("seal %s's credentials: %w", kind, err)
	}
	if len(config) == 0 {
		config = json.RawMessage(`{}`)
	}
	in, err := s.st.PutIntegration(ctx, domain.Integration{Kind: kind, Org: org, Config: config, Sealed: sealed, UpdatedAt: s.now()})
	if err != nil {
		return View{}, err
	}
	return view(in, secrets), nil
}

func view(in domain.Integration, secrets map[string]string) View {
	names := make([]string, 0, len(secrets))
	for k := range secrets {
		names = append(names, k)
	}
	sort.Strings(names)
	return View{Kind: in.Kind, Config: in.Config, Secrets: names, UpdatedAt: in.UpdatedAt}
}

func checkConfig(kind domain.IntegrationKind, sp spec, config json.RawMessage) error {
	if len(config) == 0 {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(config, &m); err != nil {
		return fmt.Errorf("%w: %s settings must be a JSON object: %v", domain.ErrInvalid, kind, err)
	}
	for k, v := range m {
		if !slices.Contains(sp.config, k) {
			return fmt.Errorf("%w: %s has no setting %q (it has %s)", domain.ErrInvalid, kind, k, strings.Join(sp.config, ", "))
		}
		if k == "api_url" || k == "dashboard_url" {
			var u string
			if json.Unmarshal(v, &u) != nil {
				return fmt.Errorf("%w: %s %s must be a string", domain.ErrInvalid, kind, k)
			}
			if p, err := url.Parse(u); err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
				return fmt.Errorf("%w: %s %s %q: want an http(s) URL", domain.ErrInvalid, kind, k, u)
			}
		}
		if err := checkRepos(k, v); err != nil {
			return fmt.Errorf("%w: %s %v", domain.ErrInvalid, kind, err)
		}
		if err := checkSlack(k, v); err != nil {
			return fmt.Errorf("%w: %s %v", domain.ErrInvalid, kind, err)
		}
	}
	return nil
}

// checkRepos checks a setting that names GitHub repositories: "repo" one,
// "repos" a list, each owner/name.
func checkRepos(key string, v json.RawMessage) error {
	var repos []string
	switch key {
	case "repo":
		var r string
		if json.Unmarshal(v, &r) != nil {
			return fmt.Errorf("repo must be a string, owner/name")
		}
		repos = []string{r}
	case "repos":
		if json.Unmarshal(v, &repos) != nil || len(repos) > 100 {
			return fmt.Errorf("repos must be a list of at most 100 owner/name")
		}
	}
	for _, r := range repos {
		if !domain.ValidRepo(r) {
			return fmt.Errorf("%s %q: want a GitHub repository owner/name", key, r)
		}
	}
	return nil
}

// checkSlack checks Slack's grants: channels name the profiles each
// channel may use (a profile or a list), thread_users are user ids.
func checkSlack(key string, v json.RawMessage) error {
	switch key {
	case "channels":
		var m map[string]json.RawMessage
		if json.Unmarshal(v, &m) != nil || len(m) > 1000 {
			return fmt.Errorf("channels must be an object of at most 1000 channel ids")
		}
		for ch, raw := range m {
			var one string
			var list []string
			if json.Unmarshal(raw, &one) == nil {
				list = []string{one}
			} else if json.Unmarshal(raw, &list) != nil || len(list) == 0 || len(list) > 50 {
				return fmt.Errorf("channel %.40q: want a profile or a list of 1 to 50 profiles", ch)
			}
			for _, p := range list {
				if !nameRE.MatchString(p) {
					return fmt.Errorf("channel %.40q: %.60q is not a profile name", ch, p)
				}
			}
		}
	case "thread_users":
		var users []string
		if json.Unmarshal(v, &users) != nil || len(users) > 1000 {
			return fmt.Errorf("thread_users must be a list of at most 1000 Slack user ids")
		}
		for _, u := range users {
			if !slackUserRE.MatchString(u) {
				return fmt.Errorf("thread_users: %.40q is not a Slack user id (U…)", u)
			}
		}
	case "allow_external", "socket_mode":
		var b bool
		if json.Unmarshal(v, &b) != nil {
			return fmt.Errorf("%s must be true or false", key)
		}
	}
	return nil
}

var (
	nameRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	slackUserRE = regexp.MustCompile(`^[UW][A-Z0-9]{2,20}$`)
)

func checkSecrets(kind domain.IntegrationKind, sp spec, secrets map[string]string) error {
	for _, k := range sp.required {
		if strings.TrimSpace(secrets[k]) == "" {
			return fmt.Errorf("%w: %s needs its %s", domain.ErrInvalid, kind, k)
		}
	}
	for k, v := range secrets {
		if !slices.Contains(sp.required, k) && !slices.Contains(sp.optional, k) {
			return fmt.Errorf("%w: %s takes no credential %q", domain.ErrInvalid, kind, k)
		}
		if len(v) > 16<<10 || strings.ContainsAny(v, "\x00") {
			return fmt.Errorf("%w: %s's %s is not a credential (at most 16 KiB, no NUL)", domain.ErrInvalid, kind, k)
		}
	}
	if kind == domain.IntegrationGitHub && secrets["token"] == "" && secrets["private_key"] == "" {
		return fmt.Errorf("%w: github needs a token, or a GitHub App's private_key (with app_id and installation_id)", domain.ErrInvalid)
	}
	return nil
}

// checkAPIURL refuses, at once, an api_url the address policy would not
// let the integration call: loopback, private, link-local or metadata
// addresses unless the operator allowed them.
func (s *Service) checkAPIURL(kind domain.IntegrationKind, config json.RawMessage) error {
	var c struct {
		APIURL string `json:"api_url"`
	}
	if s.hosts == nil || json.Unmarshal(config, &c) != nil || c.APIURL == "" {
		return nil
	}
	u, err := url.Parse(c.APIURL)
	if err != nil {
		return fmt.Errorf("%w: %s api_url: %v", domain.ErrInvalid, kind, err)
	}
	port := map[string]uint16{"http": 80, "https": 443}[u.Scheme]
	if p, err := strconv.ParseUint(u.Port(), 10, 16); err == nil {
		port = uint16(p)
	}
	if err := s.hosts.CheckHost(u.Hostname(), port); err != nil {
		return fmt.Errorf("%w: %s api_url %s: %v (a server reaches it only when started with --allow-integration-url)", domain.ErrInvalid,
			kind, u.Host, err)
	}
	return nil
}

// List shows org's integrations.
func (s *Service) List(ctx context.Context, org domain.OrgID) ([]View, error) {
	ins, err := s.st.ListIntegrations(ctx, org)
	if err != nil {
		return nil, err
	}
	out := make([]View, 0, len(ins))
	for _, in := range ins {
		_, secrets, err := s.open(in)
		if err != nil {
			return nil, err
		}
		out = append(out, view(in, secrets))
	}
	return out, nil
}

// Remove forgets org's integration and its credentials.
func (s *Service) Remove(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind) error {
	if err := s.st.DeleteIntegration(ctx, org, kind); err != nil {
		if errors.Is(err, domain.ErrNotFound) {
			return fmt.Errorf("%w: %s is not configured", domain.ErrNotFound, kind)
		}
		return err
	}
	return nil
}

// Holder is the organisation holding the integration of kind;
// ErrNotFound when it is not configured.
func (s *Service) Holder(ctx context.Context, kind domain.IntegrationKind) (domain.OrgID, error) {
	in, err := s.st.GetIntegration(ctx, kind)
	if err != nil {
		return "", fmt.Errorf("the holder of %s: %w", kind, err)
	}
	return in.Org, nil
}

// Open returns an integration's settings and credentials, for the part
// that calls it; ErrNotFound when it is not configured.
func (s *Service) Open(ctx context.Context, kind domain.IntegrationKind) (json.RawMessage, map[string]string, error) {
	in, err := s.st.GetIntegration(ctx, kind)
	if err != nil {
		if errors.Is(err, domain.ErrNotFound) {
			return nil, nil, fmt.Errorf("%w: %s is not configured (engrams integration add %s)", domain.ErrNotFound, kind, kind)
		}
		return nil, nil, err
	}
	return s.open(in)
}

func (s *Service) open(in domain.Integration) (json.RawMessage, map[string]string, error) {
	if s.seal == nil {
		return nil, nil, fmt.Errorf("open %s's credentials: this server keeps no secrets", in.Kind)
	}
	plain, err := s.seal.Open(in.Sealed, domain.SealedIntegration.AssociatedData(string(in.Kind)))
	if err != nil {
		return nil, nil, fmt.Errorf("open %s's credentials: %w", in.Kind, err)
	}
	var secrets map[string]string
	if err := json.Unmarshal(plain, &secrets); err != nil {
		return nil, nil, fmt.Errorf("decode %s's credentials: %w", in.Kind, err)
	}
	return in.Config, secrets, nil
}
