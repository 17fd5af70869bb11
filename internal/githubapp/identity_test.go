package githubapp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/connector/connectortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/githubtest"
)

// TestCommentsOnlyByMembers: an @engrams comment starts runs only for the
// engrams member its author's account is, as them; anyone else's is a
// refused run answered, once, with how to get access (in words that do
// not mention the app, so the answer starts nothing). A pull request of
// someone who is no member still runs, as the organisation's; a bot's
// comment is not acted on.
func TestCommentsOnlyByMembers(t *testing.T) {
	t.Parallel()
	a, gh, st := newAppWithStore(t)
	runs := &connectortest.Runs{Triggers: map[string]connector.Trigger{TriggerPR: reviewTrigger}}
	p := connectortest.Pipeline(t, runs, time.Now, a)
	deliver := func(id, event string, body []byte) {
		t.Helper()
		if _, err := connectortest.Deliver(t, p, connector.SourceGitHub, signed(event, id)(body, time.Time{}, false), body); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	comment := func(id int64, author, text string) []byte {
		return githubtest.IssueCommentOf(githubtest.CommentEvent{Repo: "acme/app", Number: 7, Body: text, Association: "MEMBER",
			Author: author, ID: id})
	}
	deliver("d1", "issue_comment", comment(1, "dev", "@engrams fix the test"))
	deliver("d2", "issue_comment", comment(2, "eve", "@engrams fix the test"))
	deliver("d2b", "issue_comment", comment(2, "eve", "@engrams fix the test")) // redelivered: answered once
	deliver("d3", "pull_request", githubtest.PullRequestOf(githubtest.PREvent{Action: "opened", Repo: "acme/app", Number: 8, SHA: "a",
		Author: "eve"}))
	deliver("d4", "issue_comment", githubtest.IssueCommentOf(githubtest.CommentEvent{Repo: "acme/app", Number: 7, Body: "@engrams hi",
		Association: "MEMBER", Author: "ci[bot]", AuthorType: "Bot", ID: 4}))
	got := runs.Runs()
	if len(got) != 3 {
		t.Fatalf("%d runs, want 3 (dev's comment, eve's refused, eve's pull request): %+v", len(got), got)
	}
	if got[0].Actor != "u-dev" || got[0].Refused != "" || got[1].Actor != "" || !strings.Contains(got[1].Refused, "not linked to an engrams member") ||
		got[2].Actor != "" || got[2].Refused != "" {
		t.Fatalf("runs: %+v", got)
	}
	cs := gh.Comments("acme/app", 7)
	if len(cs) != 1 || !strings.Contains(cs[0].Body, "engrams identity link github") || strings.Contains(cs[0].Body, "@engrams") {
		t.Fatalf("answers on the pull request: %+v", cs)
	}
	// Removed from the organisation, dev's account no longer lets them in.
	if err := st.RemoveMember(t.Context(), domain.FirstOrg, "u-dev", time.Now()); err != nil {
		t.Fatal(err)
	}
	deliver("d5", "issue_comment", comment(5, "dev", "@engrams again"))
	if last := runs.Runs()[3]; last.Actor != "" || last.Refused == "" {
		t.Fatalf("a removed member's comment: %+v", last)
	}
}

// TestLinkByComment: `engrams identity link github bob` makes a code for
// bob's login; bob's comment saying it, on an issue or a pull request,
// links his account (its id) to him, and his comments then start runs as
// him. The same code said by another login links nothing and leaves the
// code for bob; a code said again or a guessed one links nothing; each is
// answered, and none starts a run.
func TestLinkByComment(t *testing.T) {
	t.Parallel()
	a, gh, st := newAppWithStore(t)
	ctx := t.Context()
	addMember(t, st, "u-bob")
	now := time.Now()
	code := "ABCD-EFGH-IJKL-MNOP"
	if err := st.CreateIdentityCode(ctx, domain.IdentityCode{Hash: domain.HashLinkCodeFor(code, "bob"), OrgID: domain.FirstOrg, UserID: "u-bob",
		Kind: domain.IntegrationGitHub, ExpiresAt: now.Add(15 * time.Minute), CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	runs := &connectortest.Runs{Triggers: map[string]connector.Trigger{TriggerPR: reviewTrigger}}
	p := connectortest.Pipeline(t, runs, time.Now, a)
	n := int64(0)
	say := func(author, text string, onIssue bool) string {
		t.Helper()
		n++
		body := githubtest.IssueCommentOf(githubtest.CommentEvent{Repo: "acme/app", Number: 9, Body: text, Association: "NONE",
			Author: author, ID: n, OnIssue: onIssue})
		if _, err := connectortest.Deliver(t, p, connector.SourceGitHub, signed("issue_comment", fmt.Sprint("d", n))(body, time.Time{}, false), body); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		cs := gh.Comments("acme/app", 9)
		if len(cs) != int(n) {
			t.Fatalf("after %q: %d answers, want %d", text, len(cs), n)
		}
		return cs[n-1].Body
	}
	if got := say("mallory", "@engrams link "+code, false); !strings.HasPrefix(got, "Not linked") {
		t.Fatalf("bob's code said by another: %q", got)
	}
	if got := say("bob", "@engrams link WXYZ-WXYZ-WXYZ-WXYZ", true); !strings.HasPrefix(got, "Not linked") {
		t.Fatalf("a guessed code: %q", got)
	}
	if got := say("bob", "@engrams  link abcd-efgh-ijkl-mnop", true); !strings.HasPrefix(got, "Linked") || strings.Contains(got, "@engrams") {
		t.Fatalf("bob's code: %q", got)
	}
	if got := say("bob", "@engrams link "+code, false); !strings.Contains(got, "was used") {
		t.Fatalf("the code said again: %q", got)
	}
	id, err := st.ListIdentities(ctx, domain.FirstOrg, "u-bob")
	if err != nil || len(id) != 1 || id[0].Kind != domain.IntegrationGitHub || id[0].How != domain.IdentityByLink {
		t.Fatalf("bob's accounts: %+v %v", id, err)
	}
	if len(runs.Runs()) != 0 {
		t.Fatalf("link codes started runs: %+v", runs.Runs())
	}
	// bob's comment now starts a run as him (a collaborator, at the floor).
	body := githubtest.IssueCommentOf(githubtest.CommentEvent{Repo: "acme/app", Number: 9, Body: "@engrams review it", Association: "COLLABORATOR",
		Author: "bob", ID: 99})
	if _, err := connectortest.Deliver(t, p, connector.SourceGitHub, signed("issue_comment", "d99")(body, time.Time{}, false), body); err != nil {
		t.Fatal(err)
	}
	if got := runs.Runs(); len(got) != 1 || got[0].Actor != "u-bob" || got[0].Refused != "" {
		t.Fatalf("bob's comment after linking: %+v", got)
	}
	for _, who := range []string{"mallory"} {
		body := githubtest.IssueCommentOf(githubtest.CommentEvent{Author: who})
		var c struct {
			Comment struct {
				User struct{ ID int64 } `json:"user"`
			} `json:"comment"`
		}
		if err := json.Unmarshal(body, &c); err != nil {
			t.Fatal(err)
		}
		if _, err := st.GetIdentity(ctx, domain.FirstOrg, domain.IntegrationGitHub, fmt.Sprint(c.Comment.User.ID)); !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("%s got an account: %v", who, err)
		}
	}
}
