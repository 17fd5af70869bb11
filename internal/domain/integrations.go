package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// IntegrationKind names a service engrams talks to on users' behalf.
type IntegrationKind string

// Integration kinds.
const (
	IntegrationSlack  IntegrationKind = "slack"
	IntegrationGitHub IntegrationKind = "github"
	IntegrationLinear IntegrationKind = "linear"
)

// Integration is one configured service: its settings (not secret) and
// its credentials, sealed (a SealedIntegration).
type Integration struct {
	Kind      IntegrationKind // one of a kind in the deployment
	Org       OrgID           // whose it is: its events start only this organisation's automations
	Config    json.RawMessage
	Sealed    []byte
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ChatThread is a chat thread (a Slack thread) carrying a task: its
// replies go to the task, the task's turns come back to it. A relay
// holds it by lease while it posts.
type ChatThread struct {
	Kind    IntegrationKind
	Channel string
	Thread  string // the thread's root message id (Slack: its ts)
	TaskID  TaskID
	RunID   AutomationRunID // the run that started the task
	// StartedBy is the chat user whose message started it: only they (or
	// users the integration names) continue its task.
	StartedBy string
	// TurnSeq is the task event seq of the current turn's prompt;
	// Message the bot message showing that turn (edited as it streams);
	// RelayedSeq the last task event relayed.
	TurnSeq    int64
	Message    string
	RelayedSeq int64
	LeaseOwner string
	LeaseUntil time.Time
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// repoRE is a GitHub owner (letters, digits, hyphens, as GitHub allows)
// and a repository name.
var repoRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9_.-]{1,100}$`)

// ValidRepo reports whether s names a GitHub repository, owner/name. The
// names "." and ".." are refused: a repository goes into API paths.
func ValidRepo(s string) bool {
	return repoRE.MatchString(s) && !strings.HasSuffix(s, "/.") && !strings.HasSuffix(s, "/..")
}

// PushedBranch is a task's changes pushed as a branch.
type PushedBranch struct {
	RepoPath string // under the coordinator's work root
	URL      string // the repository's
	Branch   string
	Base     string // the branch it was cloned from (the pull request's base)
	Commit   string
}

// ErrNothingChanged is the refusal to push a task that changed nothing
// (an invalid request: there is no branch to push).
var ErrNothingChanged = fmt.Errorf("%w: the task changed nothing", ErrInvalid)

// AuthorAssociations are GitHub's author associations (of a pull request's
// author, of a comment's), highest first, as a github_pr trigger's floor
// (min_author) names them.
var AuthorAssociations = []string{"owner", "member", "collaborator", "contributor", "first_time_contributor", "first_timer", "none"}

// DefaultMinAuthor is a github_pr trigger's floor when it names none:
// owners, members and collaborators.
const DefaultMinAuthor = "collaborator"

// AuthorAtLeast reports whether GitHub's author association assoc (e.g.
// "MEMBER") is at or above floor; an unknown one (MANNEQUIN, "") ranks as
// none.
func AuthorAtLeast(assoc, floor string) bool {
	rank := func(s string) int {
		for i, a := range AuthorAssociations {
			if strings.EqualFold(a, s) {
				return i
			}
		}
		return len(AuthorAssociations) - 1
	}
	return rank(assoc) <= rank(floor)
}

// SizeText is n bytes for people: in KiB or MiB where it is a whole
// number of them.
func SizeText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Identity maps a person's account in an integration (Slack: "TEAM:USER";
// GitHub: the numeric user id; Linear: the user's id) to an engrams user in
// an organisation, found by a verified email both sides give
// (IdentityByEmail) or linked by the person (IdentityByLink).
type Identity struct {
	OrgID      OrgID
	Kind       IntegrationKind
	ExternalID string
	UserID     UserID
	How        IdentityHow
	CreatedAt  time.Time
}

// IdentityHow says how an identity was mapped.
type IdentityHow string

const (
	IdentityByEmail IdentityHow = "email"
	IdentityByLink  IdentityHow = "link"
)

// IdentityCode is a link a person asked for: said to the integration of
// Kind by an account before ExpiresAt, once, it maps that account to
// UserID in OrgID. Only its hash is kept.
type IdentityCode struct {
	Hash      string
	OrgID     OrgID
	UserID    UserID
	Kind      IntegrationKind
	ExpiresAt time.Time
	CreatedAt time.Time
}

// HashLinkCode is what an IdentityCode keeps of its code: the SHA-256 of
// the code in upper case, so "abcd-…" said in Slack is the same code.
func HashLinkCode(code string) string {
	sum := sha256.Sum256([]byte(strings.ToUpper(strings.TrimSpace(code))))
	return hex.EncodeToString(sum[:])
}

// HashLinkCodeFor is what an IdentityCode made for one account keeps (a
// GitHub login, where the code is said in public): the code's hash bound
// to the account, in lower case, so the same code said by another
// account is no code at all (and does not use it up).
func HashLinkCodeFor(code, account string) string {
	if account == "" {
		return HashLinkCode(code)
	}
	sum := sha256.Sum256([]byte(strings.ToUpper(strings.TrimSpace(code)) + "\x00" + strings.ToLower(account)))
	return hex.EncodeToString(sum[:])
}
