package connector

import (
	"context"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// people is an in-memory People.
type people struct {
	ids     map[string]domain.Identity // kind/account
	users   map[string]domain.User     // by email
	members map[domain.UserID]bool
	codes   map[string]domain.IdentityCode
}

func (p *people) GetIdentity(_ context.Context, _ domain.OrgID, kind domain.IntegrationKind, id string) (domain.Identity, error) {
	if i, ok := p.ids[string(kind)+"/"+id]; ok {
		return i, nil
	}
	return domain.Identity{}, domain.ErrNotFound
}

func (p *people) PutIdentity(_ context.Context, id domain.Identity) error {
	p.ids[string(id.Kind)+"/"+id.ExternalID] = id
	return nil
}

func (p *people) UserByEmail(_ context.Context, email string) (domain.User, error) {
	if u, ok := p.users[email]; ok {
		return u, nil
	}
	return domain.User{}, domain.ErrNotFound
}

func (p *people) GetMember(_ context.Context, _ domain.OrgID, u domain.UserID) (domain.Member, error) {
	if p.members[u] {
		return domain.Member{}, nil
	}
	return domain.Member{}, domain.ErrNotFound
}

func (p *people) TakeIdentityCode(_ context.Context, hash string, _ time.Time) (domain.IdentityCode, error) {
	c, ok := p.codes[hash]
	if !ok {
		return c, domain.ErrNotFound
	}
	delete(p.codes, hash)
	return c, nil
}

// TestIdentities: an account is its mapping's user while they are a
// member; else, given a verified email, that email's member (remembered);
// a link code maps an account once, and only in its own integration.
func TestIdentities(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := &people{ids: map[string]domain.Identity{"github/1": {UserID: "u-gone"}, "github/2": {UserID: "u-ada"}},
		users:   map[string]domain.User{"ada@example.com": {ID: "u-ada"}, "gone@example.com": {ID: "u-gone"}},
		members: map[domain.UserID]bool{"u-ada": true, "u-bob": true},
		codes: map[string]domain.IdentityCode{domain.HashLinkCodeFor("C1", "bob"): {UserID: "u-bob", Kind: domain.IntegrationGitHub},
			domain.HashLinkCode("C2"): {UserID: "u-bob", Kind: domain.IntegrationSlack}}}
	ids := Identities{People: p, Kind: domain.IntegrationGitHub, Now: time.Now}
	email := func(e string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { return e, nil }
	}
	for _, c := range []struct {
		account string
		email   func(context.Context) (string, error)
		want    domain.UserID
	}{
		{"2", nil, "u-ada"},
		{"1", email("ada@example.com"), ""}, // mapped to one removed: the email is not asked
		{"3", nil, ""},
		{"3", email("nobody@example.com"), ""},
		{"3", email("gone@example.com"), ""},
		{"3", email(" Ada@Example.com "), "u-ada"},
		{"", nil, ""},
	} {
		got, err := ids.Member(ctx, domain.FirstOrg, c.account, c.email)
		if err != nil || got != c.want {
			t.Errorf("Member(%q) = %q, %v; want %q", c.account, got, err, c.want)
		}
	}
	if id := p.ids["github/3"]; id.UserID != "u-ada" || id.How != domain.IdentityByEmail {
		t.Errorf("the account found by email is remembered as %+v", id)
	}
	if _, ok, err := ids.Link(ctx, domain.HashLinkCode("C2"), "9"); ok || err != nil {
		t.Errorf("a Slack code linked a GitHub account: %v %v", ok, err)
	}
	if _, ok, _ := ids.Link(ctx, domain.HashLinkCodeFor("C1", "mallory"), "8"); ok {
		t.Error("bob's code linked mallory's account")
	}
	if u, ok, err := ids.Link(ctx, domain.HashLinkCodeFor("c1", "Bob"), "9"); !ok || err != nil || u != "u-bob" || p.ids["github/9"].How != domain.IdentityByLink {
		t.Errorf("bob's code: %q %v %v %+v", u, ok, err, p.ids["github/9"])
	}
	if _, ok, _ := ids.Link(ctx, domain.HashLinkCodeFor("C1", "bob"), "9"); ok {
		t.Error("a code linked twice")
	}
	if u, err := (Identities{Kind: domain.IntegrationGitHub}).Member(ctx, domain.FirstOrg, "2", nil); u != "" || err != nil {
		t.Errorf("no People: %q %v", u, err)
	}
}
