package profiles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/ghapp"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/imagejobs"
	"github.com/engrams/engrams/internal/secrets"
	"github.com/engrams/engrams/internal/store"
)

// resolveSpec checks spec against the images, harnesses and secrets
// registered now, fills in repo paths, and computes what a task started
// from it gets. Problems are for the user to fix (the receipt is then
// partial); the error is a failure to look things up.
func (c *Profiles) resolveSpec(ctx context.Context, org domain.OrgID, spec *apiv1.ProfileSpec) (apiv1.Receipt, problems, error) {
	probs := checkStatic(spec)
	r := apiv1.Receipt{Model: spec.Model, Mode: spec.Mode, Repos: spec.Repos, Env: sortedKeys(spec.Env), IdleTimeoutS: spec.IdleTimeoutS}
	libc, err := c.receiptImage(ctx, org, spec.Image, &r, &probs)
	if err != nil {
		return r, nil, err
	}
	d, known, err := c.receiptHarness(ctx, spec.Harness, libc, &r, &probs)
	if err != nil {
		return r, nil, err
	}
	if known {
		r.Model = pickChoice(&probs, "model", spec.Model, d, d.Models, true)
		r.Mode = pickChoice(&probs, "mode", spec.Mode, d, d.Modes, false)
		for _, cr := range d.Credentials {
			for _, v := range []string{cr.Env, cr.BaseURLEnv} {
				if _, ok := spec.Env[v]; ok && v != "" {
					probs.add("env %s is the harness's credential variable, which engrams sets (to the model gateway's placeholder or address): remove it", v)
				}
			}
		}
	}
	models, err := c.receiptModelKeys(ctx, org, spec, d, known, &r, &probs)
	if err != nil {
		return r, nil, err
	}
	brokered, err := c.receiptRepoKeys(ctx, org, spec, &r, &probs)
	if err != nil {
		return r, nil, err
	}
	r.Hosts = receiptHosts(spec, d, models, brokered)
	r.Enforcement = receiptEnforcement()
	r.Powers = receiptPowers(spec, len(models) > 0)
	for _, s := range spec.Skills {
		r.Skills = append(r.Skills, apiv1.ReceiptSkill{Name: s})
	}
	for _, a := range spec.Apps {
		r.Apps = append(r.Apps, apiv1.ReceiptApp{Name: a.Name, Port: a.Port})
	}
	return r, probs, nil
}

// receiptImage resolves the profile's image; it returns its C library
// ("" while unknown).
func (c *Profiles) receiptImage(ctx context.Context, org domain.OrgID, name string, r *apiv1.Receipt, probs *problems) (string, error) {
	r.Image.Name = name
	if name == "" {
		return "", nil
	}
	img, err := c.st.GetImageByName(ctx, org, name)
	if errors.Is(err, store.ErrNotFound) {
		probs.add("image %q: no enabled image has that name (see `engrams image list`, or enable it with `engrams image enable REF --name %s`)", name, name)
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("find image %s: %w", name, err)
	}
	v, err := c.images.View(ctx, img)
	if err != nil {
		return "", err
	}
	if v.State == imagejobs.ImageFailed {
		probs.add("image %s failed to enable%s: enable it again with `engrams image enable %s --name %s`", name, imagejobs.JobSummary(v.LastJob), img.Ref, name)
	}
	r.Image = apiv1.ReceiptImage{ID: string(img.ID), Name: img.Name, Ref: img.Ref, Digest: img.Digest, Libc: v.Config.Libc}
	return v.Config.Libc, nil
}

// receiptHarness resolves NAME or NAME@VERSION to a registered bundle and
// checks it runs on the image's C library (when known).
func (c *Profiles) receiptHarness(ctx context.Context, ref, libc string, r *apiv1.Receipt, probs *problems) (guestapi.HarnessDescriptor, bool, error) {
	name, version, _ := strings.Cut(ref, "@")
	r.Harness = apiv1.ReceiptHarness{Name: name, Version: version}
	if ref == "" {
		return guestapi.HarnessDescriptor{}, false, nil
	}
	if name == "" || len(ref) > 160 || strings.ContainsAny(ref, " \x00\n/") {
		probs.add("harness %q: want NAME or NAME@VERSION", ref)
		return guestapi.HarnessDescriptor{}, false, nil
	}
	h, err := c.st.FindHarness(ctx, name, version)
	if errors.Is(err, store.ErrNotFound) {
		probs.add("harness %s is not registered (see `engrams harness list`; build one with `engrams harness build NAME` or add one with `engrams harness add DIR`)", ref)
		return guestapi.HarnessDescriptor{}, false, nil
	}
	if err != nil {
		return guestapi.HarnessDescriptor{}, false, fmt.Errorf("find harness %s: %w", ref, err)
	}
	d, err := guestapi.ParseHarnessDescriptor(h.Descriptor)
	if err != nil {
		return guestapi.HarnessDescriptor{}, false, fmt.Errorf("harness %s@%s: %w", h.Name, h.Version, err)
	}
	r.Harness = apiv1.ReceiptHarness{ID: h.ID, Name: h.Name, Version: h.Version, Digest: h.Digest, Protocol: d.Protocol}
	if libc != "" {
		if err := d.Requires.Compatible(libc, ""); err != nil {
			probs.add("harness %s@%s cannot run on image %s: %v", h.Name, h.Version, r.Image.Name, err)
		}
	}
	return d, true, nil
}

// pickChoice checks a model or mode against the harness's list and returns
// the effective one ("" = the list's first).
func pickChoice(probs *problems, field, want string, d guestapi.HarnessDescriptor, list []string, wildcard bool) string {
	offered := slices.DeleteFunc(slices.Clone(list), func(s string) bool { return s == guestapi.AnyModel })
	switch {
	case want == "":
		if len(list) > 0 {
			return list[0]
		}
		return ""
	case slices.Contains(offered, want):
		return want
	case len(want) > 128 || strings.ContainsFunc(want, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		probs.add("%s %q: want at most 128 characters without spaces", field, want)
	case wildcard && slices.Contains(list, guestapi.AnyModel):
		return want
	case len(offered) == 0:
		probs.add("%s %q: harness %s@%s has no %ss to choose from: leave it empty", field, want, d.Name, d.Version, field)
	default:
		probs.add("%s %q: harness %s@%s offers %s", field, want, d.Name, d.Version, strings.Join(offered, ", "))
	}
	return want
}

// modelKey is a model credential granted to the harness, for the receipt.
type modelKey struct {
	secret domain.Secret
	meta   apiv1.SecretMeta
	cred   guestapi.HarnessCredential
}

// receiptModelKeys checks the profile's credentials: live secrets, each of
// a kind the harness needs, one per kind, every kind it needs covered.
func (c *Profiles) receiptModelKeys(ctx context.Context, org domain.OrgID, spec *apiv1.ProfileSpec, d guestapi.HarnessDescriptor, known bool, r *apiv1.Receipt, probs *problems) ([]modelKey, error) {
	var keys []modelKey
	byKind := map[string]string{}
	needs := make([]string, 0, len(d.Credentials))
	for _, cr := range d.Credentials {
		needs = append(needs, cr.Kind)
	}
	for i, name := range spec.Credentials {
		if slices.Contains(spec.Credentials[:i], name) {
			probs.add("credentials: %s is listed twice", name)
			continue
		}
		s, meta, ok, err := c.liveSecret(ctx, org, "credentials", name, probs)
		if err != nil || !ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		ci := slices.IndexFunc(d.Credentials, func(cr guestapi.HarnessCredential) bool { return cr.Kind == s.Kind })
		switch {
		case !known:
		case ci < 0 && len(needs) == 0:
			probs.add("credentials: harness %s@%s takes no credentials, and secret %s (%s) cannot be put anywhere else yet", d.Name, d.Version, name, s.Kind)
		case ci < 0:
			probs.add("credentials: secret %s is of kind %s; harness %s@%s needs %s", name, s.Kind, d.Name, d.Version, strings.Join(needs, ", "))
		case byKind[s.Kind] != "":
			probs.add("credentials: %s and %s are both %s: name one", byKind[s.Kind], name, s.Kind)
		default:
			byKind[s.Kind] = name
			keys = append(keys, modelKey{secret: s, meta: meta, cred: d.Credentials[ci]})
		}
	}
	for _, cr := range d.Credentials {
		if known && byKind[cr.Kind] == "" {
			probs.add("harness %s@%s needs a credential of kind %s, or it cannot authenticate: add one with --credential SECRET "+
				"(make it with `engrams secret create NAME --kind %s`)", d.Name, d.Version, cr.Kind, cr.Kind)
		}
	}
	for _, k := range keys {
		r.Credentials = append(r.Credentials, apiv1.ReceiptCredential{
			Name: k.secret.Name, SecretID: string(k.secret.ID), Kind: k.secret.Kind, Delivery: apiv1.DeliveryGateway, Env: k.cred.Env, EnforcedOn: everyBackend(),
			Detail: fmt.Sprintf("gateway-injected: the guest sees a placeholder in %s%s; the model gateway swaps in the real key for requests to %s",
				k.cred.Env, baseURLNote(k.cred), k.meta.BaseURL),
		})
	}
	return keys, nil
}

func baseURLNote(cr guestapi.HarnessCredential) string {
	if cr.BaseURLEnv == "" {
		return ""
	}
	return " and " + cr.BaseURLEnv + " points at the gateway"
}

// receiptRepoKeys checks repo credentials: live git_https or github_app
// secrets for the repo's host (an app's repos on one account, which its
// installation covers). It returns the hosts they are for, in order: the
// egress proxy brokers them.
func (c *Profiles) receiptRepoKeys(ctx context.Context, org domain.OrgID, spec *apiv1.ProfileSpec, r *apiv1.Receipt, probs *problems) ([]brokeredHost, error) {
	var order []string
	uses := map[string]*repoKey{}
	for i, repo := range spec.Repos {
		if repo.Credential == "" {
			continue
		}
		field := fmt.Sprintf("repos[%d].credential", i)
		s, meta, ok, err := c.liveSecret(ctx, org, field, repo.Credential, probs)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if !secrets.GitKind(s.Kind) {
			probs.add("%s: secret %s is of kind %s; a repo needs a %s or %s secret", field, s.Name, s.Kind, apiv1.SecretGitHTTPS, apiv1.SecretGitHubApp)
			continue
		}
		if meta.Host == "" {
			probs.add("%s: secret %s names no git host; create it again with --host", field, s.Name)
		} else if u, err := url.Parse(repo.URL); err == nil && !strings.EqualFold(meta.Host, u.Host) {
			probs.add("%s: secret %s is for %s, the repo is on %s", field, s.Name, meta.Host, u.Host)
		}
		k := uses[s.Name]
		if k == nil {
			k = &repoKey{secret: s, meta: meta}
			uses[s.Name] = k
			order = append(order, s.Name)
		}
		k.paths = append(k.paths, repo.Path)
		if h, ok := domain.BrokeredHostOf(repo.URL); ok && k.brokered == "" {
			k.brokered = strings.TrimSuffix(h, ":443")
		}
		if repo.Push {
			k.push = append(k.push, repo.Path)
		}
		if repo.API {
			k.api = append(k.api, repo.Path)
		}
		if s.Kind == apiv1.SecretGitHubApp {
			k.addAppRepo(field, repo.URL, probs)
		}
	}
	var brokered []brokeredHost
	for _, name := range order {
		k := uses[name]
		r.Credentials = append(r.Credentials, k.receipt())
		if k.brokered != "" {
			brokered = append(brokered, brokeredHost{host: k.brokered, secret: k.secret})
		}
		if k.brokered == "github.com" && len(k.api) > 0 {
			brokered = append(brokered, brokeredHost{host: "api.github.com", secret: k.secret})
		}
	}
	return brokered, nil
}

// repoKey is a git credential and the repos a profile clones with it.
type repoKey struct {
	secret   domain.Secret
	meta     apiv1.SecretMeta
	paths    []string
	brokered string   // the host the guest's requests are brokered on ("" for http or address URLs)
	push     []string // the paths of repos the guest may push to
	api      []string // the paths of repos the guest may call the REST API for
	owner    string   // github_app: the account of its repos
	names    []string // github_app: the repos a token is scoped to
}

// addAppRepo adds a repo cloned with a GitHub App: its token is scoped to
// repository names on one account (the installation's).
func (k *repoKey) addAppRepo(field, repoURL string, probs *problems) {
	owner, name, err := ghapp.RepoOf(repoURL)
	switch {
	case err != nil:
		probs.add("%s: %v", field, err)
	case k.owner != "" && !strings.EqualFold(owner, k.owner):
		probs.add("%s: GitHub App secret %s is installed on one account, and its repos are on %s and %s: use one app secret per account", field, k.secret.Name, k.owner, owner)
	default:
		k.owner = owner
		if !slices.Contains(k.names, name) {
			k.names = append(k.names, name)
		}
	}
}

func (k *repoKey) receipt() apiv1.ReceiptCredential {
	rc := apiv1.ReceiptCredential{Name: k.secret.Name, SecretID: string(k.secret.ID), Kind: k.secret.Kind, Delivery: apiv1.DeliveryClone,
		EnforcedOn: everyBackend(), Detail: "used by the coordinator to clone " + strings.Join(k.paths, ", ") + ", never in the guest"}
	if k.secret.Kind == apiv1.SecretGitHubApp {
		rc.Detail = fmt.Sprintf("GitHub App %s (installation %d): the coordinator mints an installation token for each task, lasting an hour, "+
			"scoped to %s/{%s} with contents:read and metadata:read, and clones %s with it; neither the key nor the token is in the guest",
			k.meta.AppID, k.meta.InstallationID, k.owner, strings.Join(k.names, ","), strings.Join(k.paths, ", "))
	}
	rc.Detail += brokeredNote(k)
	return rc
}

// liveSecret finds org's live secret a profile names, adding a problem when
// there is none.
func (c *Profiles) liveSecret(ctx context.Context, org domain.OrgID, field, name string, probs *problems) (domain.Secret, apiv1.SecretMeta, bool, error) {
	s, err := c.st.GetSecretByName(ctx, org, name)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !secrets.UserKind(s.Kind)) {
		probs.add("%s: no secret %q (see `engrams secret list`; make it with `engrams secret create %s --kind KIND`)", field, name, name)
		return domain.Secret{}, apiv1.SecretMeta{}, false, nil
	}
	if err != nil {
		return domain.Secret{}, apiv1.SecretMeta{}, false, fmt.Errorf("find secret %s: %w", name, err)
	}
	var meta apiv1.SecretMeta
	if err := json.Unmarshal(s.Meta, &meta); err != nil {
		return domain.Secret{}, apiv1.SecretMeta{}, false, fmt.Errorf("decode meta of secret %s: %w", name, err)
	}
	s.Sealed = nil
	return s, meta, true, nil
}

// hostOf is a URL's host:port (the scheme's port when none is given).
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "http" {
		return u.Host + ":80"
	}
	return u.Host + ":443"
}
