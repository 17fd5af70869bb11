package profiles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/netpolicy"
	"github.com/engrams/engrams/internal/store"
)

// Profile bounds.
const (
	maxProfileRepos   = 32
	maxProfileEgress  = 256
	maxProfileSkills  = 64
	maxProfileApps    = 16
	maxProfileCreds   = 16
	maxIdleTimeoutSec = 30 * 24 * 3600
)

var (
	profileNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	envNameRE     = regexp.MustCompile(`^[A-Z_][A-Z0-9_]{0,127}$`)
	repoPathRE    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)
	skillRE       = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}(@[A-Za-z0-9][A-Za-z0-9._+-]{0,63})?$`)
	appNameRE     = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)
)

// ProfileView is a profile with its spec decoded and, when resolved, what
// it grants now and what keeps it from starting tasks.
type ProfileView struct {
	Profile  domain.Profile
	Spec     apiv1.ProfileSpec
	Receipt  apiv1.Receipt
	Problems []string
}

// problems collects what is wrong with a profile.
type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// invalidProfile is the error listing every problem of profile name.
func invalidProfile(name string, probs problems) error {
	if len(probs) == 1 {
		return fmt.Errorf("%w: profile %s: %s", domain.ErrInvalid, name, probs[0])
	}
	return fmt.Errorf("%w: profile %s has %d problems:\n  - %s", domain.ErrInvalid, name, len(probs), strings.Join(probs, "\n  - "))
}

// CreateProfile validates spec against org's images, harnesses and
// secrets and grants against its members (every problem listed at once)
// and stores it at version 1.
func (c *Profiles) CreateProfile(ctx context.Context, org domain.OrgID, name string, spec apiv1.ProfileSpec, grants []domain.Grant) (ProfileView, error) {
	var probs problems
	if !profileNameRE.MatchString(name) {
		probs.add("name %q: want 1-63 of a-z 0-9 . _ - starting with a letter or digit", name)
	}
	if err := c.checkGrants(ctx, org, grants, &probs); err != nil {
		return ProfileView{}, err
	}
	receipt, more, err := c.resolveSpec(ctx, org, &spec)
	if err != nil {
		return ProfileView{}, err
	}
	if probs = append(probs, more...); len(probs) > 0 {
		return ProfileView{}, invalidProfile(name, probs)
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return ProfileView{}, fmt.Errorf("create profile %s: %w", name, err)
	}
	p, err := c.st.CreateProfile(ctx, domain.Profile{ID: domain.ProfileID(c.newID()), Org: org, Name: name, Spec: raw, Grants: grants, CreatedAt: c.now()})
	if errors.Is(err, store.ErrConflict) {
		return ProfileView{}, fmt.Errorf("%w: a profile named %s exists; change it with `engrams profile edit %s`", store.ErrConflict, name, name)
	}
	if err != nil {
		return ProfileView{}, fmt.Errorf("create profile %s: %w", name, err)
	}
	c.log.Info("profile created", "profile_id", p.ID, "name", p.Name, "image", spec.Image, "harness", spec.Harness)
	return ProfileView{Profile: p, Spec: spec, Receipt: receipt}, nil
}

// PreviewReceipt resolves spec as CreateProfile and UpdateProfile would,
// storing nothing: its receipt and every problem a save would refuse.
func (c *Profiles) PreviewReceipt(ctx context.Context, org domain.OrgID, spec apiv1.ProfileSpec) (apiv1.Receipt, []string, error) {
	r, probs, err := c.resolveSpec(ctx, org, &spec)
	return r, probs, err
}

// ProfileEdit is an edit of a profile made from Version: its spec, and
// its grants unless Grants is nil (kept as they are).
type ProfileEdit struct {
	Spec    apiv1.ProfileSpec
	Grants  *[]domain.Grant
	Version int64
}

// UpdateProfile applies edit to org's profile named nameOrID; a profile
// changed since edit.Version is a conflict saying so.
func (c *Profiles) UpdateProfile(ctx context.Context, org domain.OrgID, nameOrID string, edit ProfileEdit) (ProfileView, error) {
	spec, version := edit.Spec, edit.Version
	if version <= 0 {
		return ProfileView{}, fmt.Errorf("%w: version: send the version the edit was made from (see `engrams profile get %s`)", domain.ErrInvalid, nameOrID)
	}
	p, err := c.findProfile(ctx, org, nameOrID)
	if err != nil {
		return ProfileView{}, err
	}
	if err := editable(p, version); err != nil {
		return ProfileView{}, err
	}
	var probs problems
	if edit.Grants != nil {
		if err := c.checkGrants(ctx, org, *edit.Grants, &probs); err != nil {
			return ProfileView{}, err
		}
		p.Grants = *edit.Grants
	}
	receipt, more, err := c.resolveSpec(ctx, org, &spec)
	if err != nil {
		return ProfileView{}, err
	}
	probs = append(probs, more...)
	if len(probs) > 0 {
		return ProfileView{}, invalidProfile(p.Name, probs)
	}
	if p.Spec, err = json.Marshal(spec); err != nil {
		return ProfileView{}, fmt.Errorf("update profile %s: %w", p.Name, err)
	}
	p.UpdatedAt = c.now()
	np, err := c.st.UpdateProfile(ctx, p, version)
	if errors.Is(err, store.ErrConflict) {
		if cur, gerr := c.st.GetProfile(ctx, p.ID); gerr == nil {
			if eerr := editable(cur, version); eerr != nil {
				return ProfileView{}, eerr
			}
		}
	}
	if err != nil {
		return ProfileView{}, fmt.Errorf("update profile %s: %w", p.Name, err)
	}
	c.log.Info("profile updated", "profile_id", np.ID, "name", np.Name, "version", np.Version)
	return ProfileView{Profile: np, Spec: spec, Receipt: receipt}, nil
}

// editable says why p cannot take an edit made from version, if it cannot.
func editable(p domain.Profile, version int64) error {
	switch {
	case !p.DeletedAt.IsZero():
		return fmt.Errorf("%w: profile %s was deleted", store.ErrConflict, p.Name)
	case p.Version != version:
		return fmt.Errorf("%w: profile %s changed since version %d (it is at version %d now): read it again with `engrams profile get %s` and redo the edit",
			store.ErrConflict, p.Name, version, p.Version, p.Name)
	}
	return nil
}

// DeleteProfile deletes org's profile; tasks that started from it keep
// their record of it, and its name is free again.
func (c *Profiles) DeleteProfile(ctx context.Context, org domain.OrgID, nameOrID string) (ProfileView, error) {
	p, err := c.findProfile(ctx, org, nameOrID)
	if err != nil {
		return ProfileView{}, err
	}
	if p.DeletedAt.IsZero() {
		if err := c.st.DeleteProfile(ctx, p.ID, c.now()); err != nil {
			return ProfileView{}, fmt.Errorf("delete profile %s: %w", p.Name, err)
		}
		c.log.Info("profile deleted", "profile_id", p.ID, "name", p.Name)
		if p, err = c.st.GetProfile(ctx, p.ID); err != nil {
			return ProfileView{}, fmt.Errorf("read deleted profile %s: %w", nameOrID, err)
		}
	}
	spec, _ := decodeProfileSpec(p)
	return ProfileView{Profile: p, Spec: spec}, nil
}

// Profiles lists the live profiles who may use, by name (without receipts).
func (c *Profiles) Profiles(ctx context.Context, who domain.Grantee) ([]ProfileView, error) {
	ps, err := c.st.ListProfiles(ctx, who.OrgID)
	if err != nil {
		return nil, fmt.Errorf("list profiles: %w", err)
	}
	out := make([]ProfileView, 0, len(ps))
	for _, p := range ps {
		if !who.MayUse(p) {
			continue
		}
		spec, err := decodeProfileSpec(p)
		if err != nil {
			return nil, err
		}
		out = append(out, ProfileView{Profile: p, Spec: spec})
	}
	return out, nil
}

// Profile returns a profile who may use (by name, or by id) with its
// receipt resolved now and the problems that keep it from starting
// tasks; one they may not use is not found, as one that does not exist.
func (c *Profiles) Profile(ctx context.Context, who domain.Grantee, nameOrID string) (ProfileView, error) {
	p, err := c.findProfile(ctx, who.OrgID, nameOrID)
	if err != nil {
		return ProfileView{}, err
	}
	if !who.MayUse(p) {
		return ProfileView{}, fmt.Errorf("profile %q: %w", nameOrID, store.ErrNotFound)
	}
	spec, err := decodeProfileSpec(p)
	if err != nil {
		return ProfileView{}, err
	}
	receipt, probs, err := c.resolveSpec(ctx, p.Org, &spec)
	if err != nil {
		return ProfileView{}, err
	}
	return ProfileView{Profile: p, Spec: spec, Receipt: receipt, Problems: probs}, nil
}

// ResolveProfile returns a live profile who may use, its spec and its
// receipt resolved now (image, harness version and secrets as they are).
// A profile that cannot start a task (something it names is gone) is
// domain.ErrInvalid listing why; a deleted or unknown one, or one who may
// not use, is ErrNotFound.
func (c *Profiles) ResolveProfile(ctx context.Context, who domain.Grantee, nameOrID string) (domain.Profile, apiv1.ProfileSpec, apiv1.Receipt, error) {
	v, err := c.Profile(ctx, who, nameOrID)
	if err != nil {
		return domain.Profile{}, apiv1.ProfileSpec{}, apiv1.Receipt{}, err
	}
	if !v.Profile.DeletedAt.IsZero() {
		return domain.Profile{}, apiv1.ProfileSpec{}, apiv1.Receipt{}, fmt.Errorf("profile %s was deleted: %w", v.Profile.Name, store.ErrNotFound)
	}
	if len(v.Problems) > 0 {
		return domain.Profile{}, apiv1.ProfileSpec{}, apiv1.Receipt{}, invalidProfile(v.Profile.Name, v.Problems)
	}
	return v.Profile, v.Spec, v.Receipt, nil
}

// findProfile returns org's live profile named nameOrID, else its
// profile with that id (deleted ones too).
func (c *Profiles) findProfile(ctx context.Context, org domain.OrgID, nameOrID string) (domain.Profile, error) {
	p, err := c.st.GetProfileByName(ctx, org, nameOrID)
	if errors.Is(err, store.ErrNotFound) {
		p, err = c.st.GetProfile(ctx, domain.ProfileID(nameOrID))
	}
	if err == nil && (org == "" || p.Org != org) {
		err = store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) {
		return p, fmt.Errorf("profile %q: %w", nameOrID, store.ErrNotFound)
	}
	if err != nil {
		return p, fmt.Errorf("find profile %s: %w", nameOrID, err)
	}
	return p, nil
}

func decodeProfileSpec(p domain.Profile) (apiv1.ProfileSpec, error) {
	var spec apiv1.ProfileSpec
	if err := json.Unmarshal(p.Spec, &spec); err != nil {
		return spec, fmt.Errorf("decode spec of profile %s: %w", p.ID, err)
	}
	return spec, nil
}

// checkStatic checks what needs no lookup and fills in repo paths.
func checkStatic(spec *apiv1.ProfileSpec) problems {
	var probs problems
	if spec.Image == "" {
		probs.add("image is required (see `engrams image list`)")
	}
	if spec.Harness == "" {
		probs.add("harness is required (see `engrams harness list`)")
	}
	probs = append(probs, checkRepos(spec.Repos)...)
	probs = append(probs, checkEnvNames(spec.Env)...)
	if len(spec.Egress) > maxProfileEgress {
		probs.add("egress: %d hosts, at most %d", len(spec.Egress), maxProfileEgress)
	}
	seen := map[string]bool{}
	for i, h := range spec.Egress {
		if err := netpolicy.CheckEntry(h); err != nil {
			probs.add("egress[%d]: %v", i, err)
		} else if seen[h] {
			probs.add("egress[%d] %q is listed twice", i, h)
		}
		seen[h] = true
	}
	probs = append(probs, checkSkillsApps(spec)...)
	if len(spec.Credentials) > maxProfileCreds {
		probs.add("credentials: %d, at most %d", len(spec.Credentials), maxProfileCreds)
	}
	if spec.IdleTimeoutS < -1 || spec.IdleTimeoutS > maxIdleTimeoutSec {
		probs.add("idle_timeout_s %d: want -1 (never), 0 (the server's default) or up to %d", spec.IdleTimeoutS, maxIdleTimeoutSec)
	}
	return probs
}

func checkRepos(repos []apiv1.ProfileRepo) problems {
	var probs problems
	if len(repos) > maxProfileRepos {
		probs.add("repos: %d, at most %d", len(repos), maxProfileRepos)
	}
	paths := map[string]int{}
	for i := range repos {
		r := &repos[i]
		u, err := checkRepoURL(r.URL)
		if err != nil {
			probs.add("repos[%d]: %v", i, err)
			continue
		}
		if r.Ref != "" && !validRef(r.Ref) {
			probs.add("repos[%d]: ref %q is not a branch, tag or commit name git accepts", i, r.Ref)
		}
		probs = append(probs, checkRepoGrant(i, *r)...)
		if r.Path == "" {
			r.Path = strings.TrimSuffix(path.Base(strings.TrimRight(u.Path, "/")), ".git")
		}
		switch j, dup := paths[r.Path]; {
		case !repoPathRE.MatchString(r.Path):
			probs.add("repos[%d]: path %q: want one path component of A-Z a-z 0-9 . _ - not starting with a dot or dash", i, r.Path)
		case dup:
			probs.add("repos[%d]: path %q is also repos[%d]'s: give one another path", i, r.Path, j)
		}
		paths[r.Path] = i
	}
	return probs
}

// checkRepoGrant checks a repo's push and api: they say what the guest
// may do with the repo's credential through the broker, so the repo needs
// one, on an https URL naming a host, with a path the broker can judge.
func checkRepoGrant(i int, r apiv1.ProfileRepo) problems {
	var probs problems
	if !r.Push && !r.API {
		return nil
	}
	_, brokered := domain.BrokeredHostOf(r.URL)
	_, pathOK := domain.BrokeredRepoPath(r.URL)
	switch {
	case r.Credential == "":
		probs.add("repos[%d]: push and api let the guest use the repo's credential through the broker: name one (--repo-credential PATH=SECRET)", i)
	case !brokered:
		probs.add("repos[%d]: push and api are brokered for https URLs naming a host; %s is not one", i, r.URL)
	case !pathOK:
		probs.add("repos[%d]: %s: the broker serves repositories at a path of plain elements, such as /OWNER/NAME", i, r.URL)
	}
	return probs
}

func checkRepoURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" || len(s) > 2048:
		return nil, fmt.Errorf("url %q: want an http or https URL such as https://github.com/acme/app.git", s)
	case u.User != nil:
		return nil, fmt.Errorf("url %q carries a login: store it as a git_https secret and name it as the repo's credential", s)
	case u.RawQuery != "" || u.Fragment != "" || strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return nil, fmt.Errorf("url %q: want no query, fragment or spaces (give the branch as the repo's ref)", s)
	}
	return u, nil
}

// validRef applies git check-ref-format's rules to a branch, tag or
// commit name.
func validRef(ref string) bool {
	if len(ref) > 255 || strings.HasPrefix(ref, "-") || strings.HasPrefix(ref, "/") || strings.HasSuffix(ref, "/") ||
		strings.HasSuffix(ref, ".") || strings.HasSuffix(ref, ".lock") || strings.Contains(ref, "..") ||
		strings.Contains(ref, "//") || strings.Contains(ref, "@{") || ref == "@" {
		return false
	}
	return !strings.ContainsFunc(ref, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune(`~^:?*[\`, r)
	})
}

func checkEnvNames(env map[string]string) problems {
	var probs problems
	if len(env) > domain.MaxEnvVars {
		probs.add("env: %d variables, at most %d", len(env), domain.MaxEnvVars)
	}
	total := 0
	for _, k := range sortedKeys(env) {
		switch {
		case !envNameRE.MatchString(k):
			probs.add("env %q: want a name of A-Z 0-9 _ not starting with a digit", k)
		case strings.HasPrefix(k, "ENGRAMS_"):
			probs.add("env %s: names starting with ENGRAMS_ are set by engrams", k)
		case strings.ContainsRune(env[k], 0):
			probs.add("env %s: the value has a NUL byte", k)
		}
		total += len(k) + len(env[k]) + 2
	}
	if total > domain.MaxEnvBytes {
		probs.add("env: %d bytes, at most %d", total, domain.MaxEnvBytes)
	}
	return probs
}

func checkSkillsApps(spec *apiv1.ProfileSpec) problems {
	var probs problems
	if len(spec.Skills) > maxProfileSkills {
		probs.add("skills: %d, at most %d", len(spec.Skills), maxProfileSkills)
	}
	seen := map[string]bool{}
	for i, s := range spec.Skills {
		if !skillRE.MatchString(s) {
			probs.add("skills[%d] %q: want NAME or NAME@VERSION (a-z 0-9 . _ -)", i, s)
		} else if seen[s] {
			probs.add("skills[%d] %q is listed twice", i, s)
		}
		seen[s] = true
	}
	if len(spec.Apps) > maxProfileApps {
		probs.add("apps: %d, at most %d", len(spec.Apps), maxProfileApps)
	}
	names, ports := map[string]bool{}, map[int]bool{}
	for i, a := range spec.Apps {
		if !appNameRE.MatchString(a.Name) {
			probs.add("apps[%d]: name %q: want 1-32 of a-z 0-9 - starting with a letter", i, a.Name)
		} else if names[a.Name] {
			probs.add("apps[%d]: name %q is listed twice", i, a.Name)
		}
		if a.Port < 1 || a.Port > 65535 {
			probs.add("apps[%d] %s: port %d is not 1 to 65535", i, a.Name, a.Port)
		} else if ports[a.Port] {
			probs.add("apps[%d] %s: port %d is listed twice", i, a.Name, a.Port)
		}
		names[a.Name], ports[a.Port] = true, true
	}
	return probs
}

// sortedKeys are the names of env, sorted.
func sortedKeys(env map[string]string) []string { return slices.Sorted(maps.Keys(env)) }
