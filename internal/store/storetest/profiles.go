package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

var profileTests = []test{
	{"ProfileRoundTrip", testProfileRoundTrip},
	{"ProfileUpdate", testProfileUpdate},
	{"ProfileUpdateRejected", testProfileUpdateRejected},
	{"ProfileDelete", testProfileDelete},
	{"ProfileUpdateConcurrent", func(t *testing.T, st store.Store) {
		UpdateProfileConcurrently(t, []store.Store{st}, 8, 10)
	}},
}

const profileSpec = `{"image":"debian","harness":"claude-code","model":"m1","mode":"auto",` +
	`"repos":[{"url":"https://git.example/r.git","credential":"github"}],"env":{"A":"1"},"egress":["api.example"]}`

func newProfile(name string) domain.Profile {
	return domain.Profile{ID: newProfileID(), Org: domain.FirstOrg, Name: name, Spec: json.RawMessage(profileSpec), CreatedAt: t0}
}

func createProfile(t *testing.T, st store.Store, name string) domain.Profile {
	t.Helper()
	p := newProfile(name)
	got, err := st.CreateProfile(t.Context(), p)
	must(t, err)
	p.Version, p.UpdatedAt = 1, p.CreatedAt
	wantProfile(t, got, p)
	return got
}

func wantProfile(t *testing.T, got, want domain.Profile) {
	t.Helper()
	if got.ID != want.ID || got.Name != want.Name || got.Version != want.Version {
		t.Fatalf("profile = %+v, want %+v", got, want)
	}
	wantJSON(t, "spec", got.Spec, want.Spec)
	wantTime(t, "created_at", got.CreatedAt, want.CreatedAt)
	wantTime(t, "updated_at", got.UpdatedAt, want.UpdatedAt)
	wantTime(t, "deleted_at", got.DeletedAt, want.DeletedAt)
}

func testProfileRoundTrip(t *testing.T, st store.Store) {
	ctx := t.Context()
	b := createProfile(t, st, "python")
	// Version, UpdatedAt and DeletedAt given to CreateProfile are ignored.
	in := newProfile("go")
	in.Version, in.UpdatedAt, in.DeletedAt, in.Spec = 7, t0.Add(time.Hour), t0, nil
	a, err := st.CreateProfile(ctx, in)
	must(t, err)
	wantProfile(t, a, domain.Profile{ID: in.ID, Name: "go", Version: 1, CreatedAt: t0, UpdatedAt: t0})

	got, err := st.GetProfile(ctx, b.ID)
	must(t, err)
	wantProfile(t, got, b)
	got, err = st.GetProfileByName(ctx, domain.FirstOrg, "go")
	must(t, err)
	wantProfile(t, got, a)
	list, err := st.ListProfiles(ctx, domain.FirstOrg)
	must(t, err)
	if len(list) != 2 {
		t.Fatalf("listed %d profiles, want 2", len(list))
	}
	wantProfile(t, list[0], a) // by name
	wantProfile(t, list[1], b)

	_, err = st.GetProfile(ctx, newProfileID())
	wantErr(t, err, store.ErrNotFound)
	_, err = st.GetProfileByName(ctx, domain.FirstOrg, "nope")
	wantErr(t, err, store.ErrNotFound)
	for _, c := range []struct {
		name string
		p    domain.Profile
		want error // nil: any error
	}{
		{"same name", newProfile("go"), store.ErrConflict},
		{"same id", domain.Profile{ID: a.ID, Org: domain.FirstOrg, Name: "other"}, store.ErrConflict},
		{"no organisation", domain.Profile{ID: newProfileID(), Name: "y"}, nil},
		{"no id", domain.Profile{Name: "x"}, nil},
		{"no name", domain.Profile{ID: newProfileID()}, nil},
		{"bad spec", domain.Profile{ID: newProfileID(), Name: "x", Spec: json.RawMessage(`{"image":`)}, nil},
	} {
		_, err := st.CreateProfile(ctx, c.p)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: CreateProfile error = %v, want %v", c.name, err, c.want)
		}
	}
	list, err = st.ListProfiles(ctx, domain.FirstOrg)
	must(t, err)
	if len(list) != 2 {
		t.Fatalf("listed %d profiles after refused creates, want 2", len(list))
	}
}

func testProfileUpdate(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "go")
	edit := p
	edit.Name, edit.Spec, edit.UpdatedAt = "golang", json.RawMessage(`{"image":"golang:1.25"}`), t0.Add(time.Minute)
	got, err := st.UpdateProfile(ctx, edit, 1)
	must(t, err)
	edit.Version = 2
	wantProfile(t, got, edit)
	stored, err := st.GetProfile(ctx, p.ID)
	must(t, err)
	wantProfile(t, stored, edit)
	_, err = st.GetProfileByName(ctx, domain.FirstOrg, "go")
	wantErr(t, err, store.ErrNotFound)

	// Every edit bumps the version by one; CreatedAt never moves; a zero
	// UpdatedAt means now.
	edit.Spec, edit.UpdatedAt, edit.CreatedAt = nil, time.Time{}, t0.Add(time.Hour)
	got, err = st.UpdateProfile(ctx, edit, 2)
	must(t, err)
	if got.Version != 3 || got.Spec != nil || !got.CreatedAt.Equal(t0) || !got.UpdatedAt.After(t0.Add(time.Minute)) {
		t.Fatalf("profile after second edit = %+v", got)
	}
}

func testProfileUpdateRejected(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "go")
	other := createProfile(t, st, "python")
	gone := createProfile(t, st, "gone")
	must(t, st.DeleteProfile(ctx, gone.ID, t0))
	edit := func(p domain.Profile, name string) domain.Profile {
		p.Name, p.Spec, p.UpdatedAt = name, json.RawMessage(`{"edited":true}`), t0.Add(time.Hour)
		return p
	}
	cases := []struct {
		name    string
		p       domain.Profile
		version int64
		want    error // nil: any error
	}{
		{"stale version", edit(p, "go"), 0, store.ErrConflict},
		{"future version", edit(p, "go"), 2, store.ErrConflict},
		{"name of another live profile", edit(p, other.Name), 1, store.ErrConflict},
		{"deleted", edit(gone, "gone"), 1, store.ErrConflict},
		{"unknown", domain.Profile{ID: newProfileID(), Org: domain.FirstOrg, Name: "x"}, 1, store.ErrNotFound},
		{"no name", edit(p, ""), 1, nil},
		{"bad spec", domain.Profile{ID: p.ID, Org: domain.FirstOrg, Name: "go", Spec: json.RawMessage(`{`)}, 1, nil},
	}
	for _, c := range cases {
		_, err := st.UpdateProfile(ctx, c.p, c.version)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: UpdateProfile error = %v, want %v", c.name, err, c.want)
		}
	}
	for _, want := range []domain.Profile{p, other} {
		got, err := st.GetProfile(ctx, want.ID)
		must(t, err)
		wantProfile(t, got, want)
	}
	// A deleted profile's name may be taken by an edit of a live one.
	got, err := st.UpdateProfile(ctx, edit(p, "gone"), 1)
	must(t, err)
	if got.Name != "gone" || got.Version != 2 {
		t.Fatalf("renamed onto a deleted profile's name: %+v", got)
	}
}

func testProfileDelete(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "go")
	keep := createProfile(t, st, "python")
	at := t0.Add(time.Minute)
	must(t, st.DeleteProfile(ctx, p.ID, at))
	// The row stays (tasks name it), its name is free.
	got, err := st.GetProfile(ctx, p.ID)
	must(t, err)
	p.DeletedAt = at
	wantProfile(t, got, p)
	_, err = st.GetProfileByName(ctx, domain.FirstOrg, "go")
	wantErr(t, err, store.ErrNotFound)
	list, err := st.ListProfiles(ctx, domain.FirstOrg)
	must(t, err)
	if len(list) != 1 || list[0].ID != keep.ID {
		t.Fatalf("live profiles after delete = %+v, want only %s", list, keep.ID)
	}
	must(t, st.DeleteProfile(ctx, p.ID, at.Add(time.Hour))) // again: nothing changes
	got, err = st.GetProfile(ctx, p.ID)
	must(t, err)
	wantProfile(t, got, p)
	wantErr(t, st.DeleteProfile(ctx, newProfileID(), t0), store.ErrNotFound)

	again := createProfile(t, st, "go")
	got, err = st.GetProfileByName(ctx, domain.FirstOrg, "go")
	must(t, err)
	wantProfile(t, got, again)
}

// UpdateProfileConcurrently has workers on stores edit one profile, each
// until it made each edits: an editor reads the profile and writes at the
// version it read, retrying on ErrConflict. No edit may be lost: a winning
// write stores the version after the one it read, the versions the winning
// writes return are exactly 2..1+workers*each, each once, and the stored
// spec is the last winner's.
func UpdateProfileConcurrently(t *testing.T, stores []store.Store, workers, each int) {
	t.Helper()
	p := createProfile(t, stores[0], "contended")
	var mu sync.Mutex
	won := map[int64]string{}
	var conflicts int
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		st := stores[w%len(stores)]
		wg.Go(func() {
			for i := 0; i < each; {
				cur, err := st.GetProfile(t.Context(), p.ID)
				if err != nil {
					errs <- err
					return
				}
				spec := fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)
				cur.Spec = json.RawMessage(spec)
				got, err := st.UpdateProfile(t.Context(), cur, cur.Version)
				mu.Lock()
				switch {
				case errors.Is(err, store.ErrConflict):
					conflicts++
				case err != nil:
					mu.Unlock()
					errs <- err
					return
				default:
					if got.Version != cur.Version+1 {
						t.Errorf("an edit of version %d stored version %d: it overwrote another edit", cur.Version, got.Version)
					}
					if prev, ok := won[got.Version]; ok {
						t.Errorf("version %d won twice: %s and %s", got.Version, prev, spec)
					}
					won[got.Version] = spec
					i++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	versions := make([]int, 0, len(won))
	for v := range won {
		versions = append(versions, int(v))
	}
	sort.Ints(versions)
	last := int64(1 + workers*each)
	if len(versions) != workers*each || versions[0] != 2 || versions[len(versions)-1] != int(last) {
		t.Fatalf("winning versions = %v, want 2..%d each once", versions, last)
	}
	got, err := stores[0].GetProfile(t.Context(), p.ID)
	must(t, err)
	if got.Version != last || string(got.Spec) != won[last] {
		t.Fatalf("stored profile at version %d with spec %s, want %d with %s", got.Version, got.Spec, last, won[last])
	}
	t.Logf("%d edits, %d conflicts", workers*each, conflicts)
}

var orgScopeTests = []test{
	{"ProfilesBelongToTheirOrganisation", testProfilesScoped},
	{"SecretsBelongToTheirOrganisation", testSecretsScoped},
	{"ProfileGrantsRoundTrip", testProfileGrants},
	{"MemberGroups", testMemberGroups},
}

// testProfilesScoped: two organisations may each have a profile of one
// name; reads by name and lists are of one organisation; an update
// naming another organisation changes nothing.
func testProfilesScoped(t *testing.T, st store.Store) {
	ctx := t.Context()
	mine := newProfile("python")
	mine.Org = "o1"
	theirs := newProfile("python")
	theirs.Org = "o2"
	a, err := st.CreateProfile(ctx, mine)
	must(t, err)
	b, err := st.CreateProfile(ctx, theirs)
	must(t, err)
	if a.Org != "o1" || b.Org != "o2" {
		t.Fatalf("orgs = %q, %q", a.Org, b.Org)
	}
	again := newProfile("python")
	again.Org = "o1"
	_, err = st.CreateProfile(ctx, again)
	wantErr(t, err, store.ErrConflict) // unique within an organisation
	for _, c := range []struct {
		org  domain.OrgID
		want domain.ProfileID
	}{{"o1", a.ID}, {"o2", b.ID}} {
		got, err := st.GetProfileByName(ctx, c.org, "python")
		must(t, err)
		list, err := st.ListProfiles(ctx, c.org)
		must(t, err)
		if got.ID != c.want || len(list) != 1 || list[0].ID != c.want {
			t.Fatalf("%s: by name %s, list %+v; want %s", c.org, got.ID, list, c.want)
		}
	}
	_, err = st.GetProfileByName(ctx, "o3", "python")
	wantErr(t, err, store.ErrNotFound)
	if list, err := st.ListProfiles(ctx, "o3"); err != nil || len(list) != 0 {
		t.Fatalf("o3's profiles = %+v, %v", list, err)
	}
	hijack := b
	hijack.Org, hijack.Name = "o1", "stolen"
	_, err = st.UpdateProfile(ctx, hijack, b.Version)
	wantErr(t, err, store.ErrNotFound)
	got, err := st.GetProfile(ctx, b.ID)
	must(t, err)
	if got.Name != "python" || got.Org != "o2" || got.Version != 1 {
		t.Fatalf("o2's profile after another organisation's update = %+v", got)
	}
}

// testSecretsScoped: secrets of one name in two organisations, and
// engrams's own (no organisation) apart from both.
func testSecretsScoped(t *testing.T, st store.Store) {
	ctx := t.Context()
	ids := map[domain.OrgID]domain.SecretID{}
	for _, org := range []domain.OrgID{"o1", "o2", ""} {
		s := newSecret("git_https", "github")
		s.Org = org
		must(t, st.PutSecret(ctx, s))
		ids[org] = s.ID
	}
	dup := newSecret("git_https", "github")
	dup.Org = "o1"
	wantErr(t, st.PutSecret(ctx, dup), store.ErrConflict)
	for org, id := range ids {
		got, err := st.GetSecretByName(ctx, org, "github")
		must(t, err)
		list, err := st.ListSecrets(ctx, org)
		must(t, err)
		if got.ID != id || got.Org != org || len(list) != 1 || list[0].ID != id {
			t.Fatalf("org %q: by name %+v, list %+v; want %s", org, got, list, id)
		}
	}
	_, err := st.GetSecretByName(ctx, "o3", "github")
	wantErr(t, err, store.ErrNotFound)
}

// testProfileGrants: grants are kept in order, replaced by an update
// (which bumps the version), and malformed ones are refused.
func testProfileGrants(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := newProfile("granted")
	p.Grants = []domain.Grant{{Kind: domain.GrantGroup, Subject: "eng"}, {Kind: domain.GrantUser, Subject: "u-ada"}}
	got, err := st.CreateProfile(ctx, p)
	must(t, err)
	if !slices.Equal(got.Grants, p.Grants) {
		t.Fatalf("grants = %+v, want %+v", got.Grants, p.Grants)
	}
	got.Grants = []domain.Grant{{Kind: domain.GrantEveryone}}
	got.Spec = json.RawMessage(profileSpec)
	up, err := st.UpdateProfile(ctx, got, 1)
	must(t, err)
	read, err := st.GetProfile(ctx, p.ID)
	must(t, err)
	if up.Version != 2 || !slices.Equal(read.Grants, []domain.Grant{{Kind: domain.GrantEveryone}}) {
		t.Fatalf("after update: version %d, grants %+v", up.Version, read.Grants)
	}
	none := newProfile("nobody")
	if got, err := st.CreateProfile(ctx, none); err != nil || len(got.Grants) != 0 {
		t.Fatalf("a profile without grants = %+v, %v", got.Grants, err)
	}
	for _, bad := range [][]domain.Grant{
		{{Kind: "root"}},
		{{Kind: domain.GrantUser}},
		{{Kind: domain.GrantEveryone, Subject: "x"}},
		{{Kind: domain.GrantGroup, Subject: "a"}, {Kind: domain.GrantGroup, Subject: "a"}},
	} {
		q := newProfile("bad")
		q.Grants = bad
		if _, err := st.CreateProfile(ctx, q); err == nil {
			t.Errorf("CreateProfile took grants %+v", bad)
		}
	}
}

// testMemberGroups: a member's groups are replaced whole and read with
// the membership; a non-member has none to set.
func testMemberGroups(t *testing.T, st store.Store) {
	ctx := t.Context()
	must(t, st.CreateOrg(ctx, domain.Org{ID: "org-g", Name: "groups", CreatedAt: t0}))
	must(t, st.CreateUser(ctx, domain.User{ID: "u-g", Email: "g@example.com", CreatedAt: t0}))
	must(t, st.PutMember(ctx, "org-g", "u-g", domain.RoleMember, t0))
	m, err := st.GetMember(ctx, "org-g", "u-g")
	must(t, err)
	if len(m.Groups) != 0 {
		t.Fatalf("a new member's groups = %+v", m.Groups)
	}
	must(t, st.SetMemberGroups(ctx, "org-g", "u-g", []string{"eng", "oncall"}))
	must(t, st.PutMember(ctx, "org-g", "u-g", domain.RoleAdmin, t0.Add(time.Hour))) // a new role keeps the groups
	m, err = st.GetMember(ctx, "org-g", "u-g")
	must(t, err)
	if !slices.Equal(m.Groups, []string{"eng", "oncall"}) || m.Role != domain.RoleAdmin {
		t.Fatalf("member = %+v", m)
	}
	must(t, st.SetMemberGroups(ctx, "org-g", "u-g", nil))
	ms, err := st.ListMembers(ctx, "org-g")
	must(t, err)
	if len(ms) != 1 || len(ms[0].Groups) != 0 {
		t.Fatalf("members after clearing groups = %+v", ms)
	}
	wantErr(t, st.SetMemberGroups(ctx, domain.FirstOrg, "u-g", []string{"eng"}), store.ErrNotFound)
	if err := st.SetMemberGroups(ctx, "org-g", "u-g", []string{""}); err == nil {
		t.Fatal("SetMemberGroups took an empty group name")
	}
}
