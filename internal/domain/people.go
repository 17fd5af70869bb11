package domain

import "time"

// OrgID names an organisation.
type OrgID string

// UserID names a person who signs in.
type UserID string

func (id OrgID) String() string  { return string(id) }
func (id UserID) String() string { return string(id) }

// FirstOrg and FirstOwner are the organisation and the owner that the
// migration to organisations (00019) made of a single-user install's data,
// and that `engrams dev` signs in as.
const (
	FirstOrg   OrgID  = "org-first"
	FirstOwner UserID = "user-first-owner"
)

// Role is what a member may do in an organisation. The order is the
// grant's size: an owner may do all an admin may, an admin all a member
// may.
type Role string

const (
	RoleMember Role = "member" // start, continue and inspect tasks and sessions
	RoleAdmin  Role = "admin"  // and curate images, profiles, secrets, integrations, automations, members, keys
	RoleOwner  Role = "owner"  // and make or remove owners
)

// rank orders roles; 0 is no role.
func (r Role) rank() int {
	switch r {
	case RoleMember:
		return 1
	case RoleAdmin:
		return 2
	case RoleOwner:
		return 3
	}
	return 0
}

// Valid says r is one of the roles.
func (r Role) Valid() bool { return r.rank() > 0 }

// AtLeast says r grants all that o grants (false when r is no role).
func (r Role) AtLeast(o Role) bool { return r.rank() > 0 && r.rank() >= o.rank() }

// Min is the smaller of two roles ("" when either is none).
func (r Role) Min(o Role) Role {
	if r.rank() == 0 || o.rank() == 0 {
		return ""
	}
	if r.rank() <= o.rank() {
		return r
	}
	return o
}

// Org is an organisation: nothing of one is visible from another.
type Org struct {
	ID        OrgID
	Name      string
	CreatedAt time.Time
}

// User is a person. FleetOperator is a deployment-level grant: hosts and
// capacity, not any organisation's data.
type User struct {
	ID            UserID
	Email         string // lower case; "" when unknown
	Name          string
	FleetOperator bool
	CreatedAt     time.Time
}

// Member is a user's role in an organisation.
type Member struct {
	OrgID     OrgID
	User      User
	Role      Role
	Groups    []string // named in profile grants; set by admins or the identity provider
	CreatedAt time.Time
}

// AuditEvent is one admin action or credential use that matters: who did
// what to which thing, when and from where.
type AuditEvent struct {
	ID         string
	OrgID      OrgID  // "" for a deployment-level action (hosts)
	ActorKind  string // "user", "key" (a service key) or "system"
	ActorID    string // the user's or key's id
	ActorName  string // their name or email, as it was then
	KeyID      string // the key the action was made with
	Action     string // e.g. "secret.create", "key.revoke"
	TargetKind string // e.g. "secret"
	TargetID   string // the name or id the route named; "" for a new thing named in Detail
	Status     int    // the HTTP status the action ended with
	Remote     string // the client's address
	At         time.Time
}

// Owner is whose a session or a task is: an organisation's, caused by a
// person (UserID; "" for the organisation's own, as an automation's
// without an owner), private to them and the organisation's admins
// unless Shared with every member.
type Owner struct {
	OrgID  OrgID
	UserID UserID
	Shared bool
}

// Viewer is who looks at sessions and tasks: a member sees their own and
// the shared ones of their organisation; with All (owners and admins)
// every one of it. Nothing of another organisation, ever.
type Viewer struct {
	OrgID  OrgID
	UserID UserID
	All    bool
}

// Sees says v may see what o owns.
func (v Viewer) Sees(o Owner) bool {
	if v.OrgID == "" || o.OrgID != v.OrgID {
		return false
	}
	return v.All || o.Shared || (o.UserID != "" && o.UserID == v.UserID)
}
