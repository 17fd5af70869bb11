package linearapp

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/connector/connectortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/lineartest"
	"github.com/engrams/engrams/internal/store"
)

func addMember(t *testing.T, st store.Store, id domain.UserID) {
	t.Helper()
	if err := st.CreateUser(t.Context(), domain.User{ID: id, Email: string(id) + "@example.com"}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutMember(t.Context(), domain.FirstOrg, id, domain.RoleMember, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// TestIssuesRunAsTheirPerson: an issue created or labelled by the Linear
// user a member's account is starts its runs as that member; anyone
// else's (or an integration's) as the organisation's, as before.
func TestIssuesRunAsTheirPerson(t *testing.T) {
	t.Parallel()
	a, _, st := newAppWithStore(t)
	addMember(t, st, "u-ada")
	if err := st.PutIdentity(t.Context(), domain.Identity{OrgID: domain.FirstOrg, Kind: domain.IntegrationLinear, ExternalID: "lin-ada",
		UserID: "u-ada", How: domain.IdentityByLink}); err != nil {
		t.Fatal(err)
	}
	runs := &connectortest.Runs{Triggers: map[string]connector.Trigger{TriggerIssue: engramsLabel}}
	p := connectortest.Pipeline(t, runs, time.Now, a)
	now := time.Now()
	label := map[string]string{"l2": "engrams"}
	for i, body := range [][]byte{
		lineartest.IssueEventBy("lin-ada", "create", "iss-1", label, nil, now),
		lineartest.IssueEventBy("lin-zed", "update", "iss-2", label, []string{}, now),
		lineartest.IssueEvent("create", "iss-3", label, nil, now),
	} {
		if _, err := connectortest.Deliver(t, p, connector.SourceLinear, signed(body, now, false), body); err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
	}
	got := runs.Runs()
	if len(got) != 3 || got[0].Actor != "u-ada" || got[1].Actor != "" || got[2].Actor != "" {
		t.Fatalf("runs: %+v", got)
	}
	for _, r := range got {
		if r.Refused != "" {
			t.Fatalf("an issue's run refused: %+v", r)
		}
	}
}

// TestLinkByComment: `engrams identity link linear` gives a code; a
// comment saying it to engrams maps its author's account to the code's
// person (answered on the issue), whose issues then start runs as them. A
// guessed code, a Slack code or a code said again links nothing and is
// answered; a comment that does not address engrams is not acted on.
func TestLinkByComment(t *testing.T) {
	t.Parallel()
	a, lin, st := newAppWithStore(t)
	ctx := t.Context()
	addMember(t, st, "u-bob")
	now := time.Now()
	for code, kind := range map[string]domain.IntegrationKind{"ABCD-EFGH-IJKL-MNOP": domain.IntegrationLinear, "SLAC-KSLA-CKSL-ACKS": domain.IntegrationSlack} {
		if err := st.CreateIdentityCode(ctx, domain.IdentityCode{Hash: domain.HashLinkCode(code), OrgID: domain.FirstOrg, UserID: "u-bob",
			Kind: kind, ExpiresAt: now.Add(15 * time.Minute), CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	runs := &connectortest.Runs{Triggers: map[string]connector.Trigger{TriggerIssue: engramsLabel}}
	p := connectortest.Pipeline(t, runs, time.Now, a)
	n := 0
	say := func(user, text string) []string {
		t.Helper()
		n++
		body := lineartest.CommentEvent(user, fmt.Sprint("cm-", n), "iss-9", text, now)
		if _, err := connectortest.Deliver(t, p, connector.SourceLinear, signed(body, now, false), body); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		return lin.Comments("iss-9")
	}
	if cs := say("lin-bob", "link ABCD-EFGH-IJKL-MNOP"); len(cs) != 0 {
		t.Fatalf("a comment not said to engrams was answered: %q", cs)
	}
	steps := []struct{ user, text, want string }{
		{"lin-bob", "@engrams link WXYZ-WXYZ-WXYZ-WXYZ", "Not linked"},
		{"lin-bob", "@engrams link SLAC-KSLA-CKSL-ACKS", "Not linked"},
		{"lin-bob", "[@engrams](https://linear.app/acme/profiles/engrams) link abcd-efgh-ijkl-mnop", "Linked"},
		{"lin-eve", "@engrams link ABCD-EFGH-IJKL-MNOP", "Not linked"},
	}
	for i, s := range steps {
		if cs := say(s.user, s.text); len(cs) != i+1 || !strings.HasPrefix(cs[i], s.want) {
			t.Fatalf("%s says %q: answers %q, want the last to start %q", s.user, s.text, cs, s.want)
		}
	}
	if id, err := st.GetIdentity(ctx, domain.FirstOrg, domain.IntegrationLinear, "lin-bob"); err != nil || id.UserID != "u-bob" || id.How != domain.IdentityByLink {
		t.Fatalf("bob's Linear account: %+v %v", id, err)
	}
	body := lineartest.IssueEventBy("lin-bob", "create", "iss-10", map[string]string{"l2": "engrams"}, nil, now)
	if _, err := connectortest.Deliver(t, p, connector.SourceLinear, signed(body, now, false), body); err != nil {
		t.Fatal(err)
	}
	if got := runs.Runs(); len(got) != 1 || got[0].Actor != "u-bob" {
		t.Fatalf("runs (link codes start none; bob's issue is his): %+v", got)
	}
}
