package apiv1

import "time"

// People, roles and the audit log (issue 27). Routes under /v1 act within
// the caller's organisation; what a caller may not see answers 404, what
// it may see but not change 403.
const (
	RouteWhoAmI       = "GET /v1/me"              // -> WhoAmI: the caller, its organisation, role and grants
	RouteListMembers  = "GET /v1/members"         // -> MemberList, oldest first
	RouteAddMember    = "POST /v1/members"        // AddMemberRequest -> Member (201)
	RouteSetMember    = "PUT /v1/members/{id}"    // SetMemberRequest -> Member: a new role
	RouteRemoveMember = "DELETE /v1/members/{id}" // its personal keys in the organisation are revoked
	RouteListAudit    = "GET /v1/audit"           // -> AuditList, newest first
)

// Roles in an organisation, least first.
const (
	RoleMember = "member" // start, continue and inspect tasks and sessions
	RoleAdmin  = "admin"  // and curate images, profiles, secrets, integrations, automations, members and keys
	RoleOwner  = "owner"  // and make or remove owners
)

// Key kinds as the API shows them.
const (
	KeyPersonal = "personal" // acts as the person who made it, within its role and theirs
	KeyService  = "service"  // acts as itself in the organisation, within its role
	KeyHost     = "host"     // a host agent's credential
	KeySignIn   = "signin"   // a browser's sign-in (its cookie); revoking it signs that browser out
)

// WhoAmI answers RouteWhoAmI.
type WhoAmI struct {
	UserID        string `json:"user_id"`
	Name          string `json:"name"` // the person's email or name, or the service key's name
	OrgID         string `json:"org_id,omitempty"`
	OrgName       string `json:"org_name,omitempty"`
	Role          string `json:"role,omitempty"` // "" when the key reaches no organisation
	FleetOperator bool   `json:"fleet_operator"`
	KeyID         string `json:"key_id"`
	KeyKind       string `json:"key_kind"` // personal or service
}

// Member is a person's role in the caller's organisation.
type Member struct {
	UserID        string    `json:"user_id"`
	Email         string    `json:"email,omitempty"`
	Name          string    `json:"name,omitempty"`
	Role          string    `json:"role"`
	Groups        []string  `json:"groups"` // what profile grants to groups name; never null
	FleetOperator bool      `json:"fleet_operator,omitempty"`
	AddedAt       time.Time `json:"added_at"`
}

// MemberList answers RouteListMembers.
type MemberList struct {
	Items      []Member `json:"items"` // never null
	NextCursor string   `json:"next_cursor"`
}

// AddMemberRequest adds a person by email (made a user when new) with a
// role no greater than the caller's.
type AddMemberRequest struct {
	Email string `json:"email"`
	Name  string `json:"name,omitempty"`
	Role  string `json:"role"`
}

// SetMemberRequest changes a member's role (when set) and the groups
// they are in (when set: the whole list).
type SetMemberRequest struct {
	Role   string    `json:"role,omitempty"`
	Groups *[]string `json:"groups,omitempty"`
}

// AuditEvent is one entry of the audit log.
type AuditEvent struct {
	ID         string    `json:"id"`
	At         time.Time `json:"at"`
	ActorKind  string    `json:"actor_kind"` // user, key or system
	ActorID    string    `json:"actor_id"`
	ActorName  string    `json:"actor_name"`
	KeyID      string    `json:"key_id,omitempty"`
	Action     string    `json:"action"` // e.g. secret.create, key.revoke, member.add
	TargetKind string    `json:"target_kind,omitempty"`
	TargetID   string    `json:"target_id,omitempty"`
	Status     int       `json:"status"`
	Remote     string    `json:"remote,omitempty"`
}

// AuditList answers RouteListAudit.
type AuditList struct {
	Items      []AuditEvent `json:"items"` // never null
	NextCursor string       `json:"next_cursor"`
}

// A person's accounts in Slack (and later GitHub and Linear): mapped by
// the email the integration confirmed, or linked by the person with a
// code they say to it.
const (
	RouteListIdentities = "GET /v1/me/identities"                     // -> IdentityList: the caller's mapped accounts
	RouteLinkIdentity   = "POST /v1/me/identities"                    // LinkIdentityRequest -> IdentityLink (201): a code to say to the integration
	RouteUnlinkIdentity = "DELETE /v1/me/identities/{kind}/{account}" // the account no longer acts as the caller
)

// Identity is one of the caller's accounts in an integration.
type Identity struct {
	Kind      string    `json:"kind"`    // slack, github or linear
	Account   string    `json:"account"` // Slack: TEAM:USER; GitHub: the numeric user id; Linear: the user's id
	How       string    `json:"how"`     // email or link
	CreatedAt time.Time `json:"created_at"`
}

// IdentityList answers RouteListIdentities.
type IdentityList struct {
	Items      []Identity `json:"items"`
	NextCursor string     `json:"next_cursor"` // always "": a person has few
}

// LinkIdentityRequest asks for a link code for an integration.
type LinkIdentityRequest struct {
	Kind string `json:"kind"` // slack, github or linear
	// Account is the account that is to say the code: for github (where
	// the code is said in public) the GitHub login, required; the code
	// works for that login only. Unused for slack and linear.
	Account string `json:"account,omitempty"`
}

// IdentityLink is a link code: said to the integration ("@engrams link
// CODE": in Slack a mention, in GitHub or Linear a comment) by an account
// before ExpiresAt, once, it maps that account to the caller.
type IdentityLink struct {
	Code      string    `json:"code"`
	ExpiresAt time.Time `json:"expires_at"`
	Say       string    `json:"say"` // what to say, and where
}
