package access

import (
	"maps"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
)

// Need is the least grant a route needs.
type Need int

const (
	// Public routes take no key: what they carry is checked otherwise
	// (a signature, a one-time code) or is no one's data.
	Public Need = iota + 1
	// Member routes need any role in an organisation; what a member may
	// see within them (their own keys, say) the handler narrows.
	Member
	// Admin routes change what the organisation's members use: images,
	// profiles, secrets, integrations, automations, members, keys.
	Admin
	// Fleet routes manage hosts: the deployment-level grant, which sees
	// no organisation's data.
	Fleet
	// AnyKey routes take any valid key and narrow what they show to it:
	// a caller's own keys, the audit log its grants may read.
	AnyKey
)

func (n Need) String() string {
	switch n {
	case Public:
		return "public"
	case Member:
		return "member"
	case Admin:
		return "admin"
	case Fleet:
		return "fleet"
	case AnyKey:
		return "any key"
	}
	return "unknown"
}

// Rule is a route's policy: the grant it needs and, when Action is set,
// the audit action its success records on the thing of kind Target.
// With Scope, the route's {id} names a thing of that kind, which the
// principal must see (domain.Viewer.Sees), else the route answers 404 as
// for one that does not exist.
type Rule struct {
	Need   Need
	Action string
	Target string
	Scope  Scope
}

// Scope is the kind of thing a route's {id} names, whose owner decides
// who may reach it.
type Scope string

const (
	ScopeSession Scope = "session"
	ScopeTask    Scope = "task"
)

// Viewer is what sessions and tasks p sees: their own and the shared ones
// of their organisation; owners and admins every one of it.
func (p Principal) Viewer() domain.Viewer {
	return domain.Viewer{OrgID: p.OrgID, UserID: p.UserID, All: p.Role.AtLeast(domain.RoleAdmin)}
}

// Grantee is p as one who asks to use a profile: owners and admins curate
// every profile of their organisation, members hold its grants. A service
// key holds grants to everyone only: not its maker's own.
func (p Principal) Grantee() domain.Grantee {
	g := domain.Grantee{OrgID: p.OrgID, Curator: p.Role.AtLeast(domain.RoleAdmin)}
	if !p.Service {
		g.UserID, g.Groups = p.UserID, p.Groups
	}
	return g
}

// Owner is whose what p creates is: p's organisation's and p's (a service
// key's maker's), private unless shared.
func (p Principal) Owner(shared bool) domain.Owner {
	return domain.Owner{OrgID: p.OrgID, UserID: p.UserID, Shared: shared}
}

// Allows says p holds the grant n needs.
func (p Principal) Allows(n Need) bool {
	switch n {
	case Public:
		return true
	case Member:
		return p.OrgID != "" && p.Role.AtLeast(domain.RoleMember)
	case Admin:
		return p.OrgID != "" && p.Role.AtLeast(domain.RoleAdmin)
	case Fleet:
		return p.Fleet
	case AnyKey:
		return p.KeyID != ""
	}
	return false
}

// Routes is the policy of every API route, by apiv1 route pattern. A
// route the API serves without a rule here does not start; a route in
// api/openapi.yaml without one fails the route matrix test.
func Routes() map[string]Rule {
	m := func() Rule { return Rule{Need: Member} }
	a := func(action, target string) Rule { return Rule{Need: Admin, Action: action, Target: target} }
	f := func(action string) Rule { return Rule{Need: Fleet, Action: action, Target: "host"} }
	pub := Rule{Need: Public}
	rules := map[string]Rule{
		apiv1.RouteVersion:        pub,
		apiv1.RouteOpenAPI:        pub,
		apiv1.RouteDashboardLogin: pub, // a one-time code
		apiv1.RouteAuthConfig:     pub, // how to sign in
		apiv1.RouteOIDCStart:      pub, // a redirect to the identity provider
		apiv1.RouteOIDCCallback:   pub, // the flow's state, the code and the ID token are checked
		apiv1.RouteCLISignIn:      pub, // a verified, fresh, unused ID token
		apiv1.RouteSignOut:        pub, // the sign-in cookie and its anti-forgery header
		apiv1.RouteHook:           pub, // signed by the hook's secret
		apiv1.RouteSlackEvents:    pub, // signed by Slack
		apiv1.RouteGitHubEvents:   pub, // signed by GitHub
		apiv1.RouteLinearEvents:   pub, // signed by Linear

		apiv1.RouteWhoAmI: {Need: AnyKey},

		// What members use, read; admins curate it.
		apiv1.RouteListImages: m(), apiv1.RouteGetImage: m(), apiv1.RouteImageJobs: m(), apiv1.RouteGetImageJob: m(),
		apiv1.RouteEnableImage:  a("image.enable", "image"),
		apiv1.RouteDisableImage: a("image.disable", "image"),
		apiv1.RouteRefreshImage: a("image.refresh", "image"),
		// Harness bundles are the deployment's software, like the host
		// agent: every organisation runs them, fleet operators install them.
		apiv1.RouteListHarnesses: m(), apiv1.RouteGetHarness: m(),
		apiv1.RouteAddHarness:    {Need: Fleet, Action: "harness.add", Target: "harness"},
		apiv1.RouteBuildHarness:  {Need: Fleet, Action: "harness.build", Target: "harness"},
		apiv1.RouteDeleteHarness: {Need: Fleet, Action: "harness.delete", Target: "harness"},
		apiv1.RouteListProfiles:  m(), apiv1.RouteGetProfile: m(), apiv1.RoutePreviewReceipt: {Need: Admin}, // it shows the secrets a spec names
		apiv1.RouteCreateProfile: a("profile.create", "profile"),
		apiv1.RouteUpdateProfile: a("profile.update", "profile"),
		apiv1.RouteDeleteProfile: a("profile.delete", "profile"),
		apiv1.RouteListSecrets:   {Need: Admin},
		apiv1.RouteCreateSecret:  a("secret.create", "secret"),
		apiv1.RouteDeleteSecret:  a("secret.delete", "secret"),

		// Keys: a member makes, lists and revokes their own; admins all of
		// the organisation's; fleet operators host tokens.
		apiv1.RouteCreateToken: {Need: AnyKey, Action: "key.create", Target: "key"},
		apiv1.RouteListTokens:  {Need: AnyKey},
		apiv1.RouteRevokeToken: {Need: AnyKey, Action: "key.revoke", Target: "key"},

		apiv1.RouteListMembers:  {Need: Admin},
		apiv1.RouteAddMember:    a("member.add", "member"),
		apiv1.RouteSetMember:    a("member.update", "member"),
		apiv1.RouteRemoveMember: a("member.remove", "member"),
		apiv1.RouteListAudit:    {Need: AnyKey}, // an admin's organisation's, a fleet operator's hosts'

		// A person's own accounts in the integrations.
		apiv1.RouteListIdentities: m(),
		apiv1.RouteLinkIdentity:   {Need: Member, Action: "identity.link_code", Target: "identity"},
		apiv1.RouteUnlinkIdentity: {Need: Member, Action: "identity.unlink", Target: "identity"},

		apiv1.RouteListHosts: {Need: Fleet}, apiv1.RouteGetHost: {Need: Fleet},
		apiv1.RouteCreateHost:  f("host.create"),
		apiv1.RouteDrainHost:   f("host.drain"),
		apiv1.RouteUndrainHost: f("host.undrain"),
		apiv1.RouteDisableHost: f("host.disable"),
		apiv1.RouteEnableHost:  f("host.enable"),
		apiv1.RouteDeleteHost:  f("host.delete"),
	}
	maps.Copy(rules, workRules())
	maps.Copy(rules, automationRules())
	return rules
}

// automationRules are the routes of automations, their runs and the
// integrations that trigger them: members read them and start runs
// (inputs only; a run by hand holds its starter's grants), admins curate.
func automationRules() map[string]Rule {
	m := func() Rule { return Rule{Need: Member} }
	a := func(action, target string) Rule { return Rule{Need: Admin, Action: action, Target: target} }
	return map[string]Rule{
		apiv1.RouteListAutomations: m(), apiv1.RouteGetAutomation: m(), apiv1.RouteListBuiltins: m(),
		apiv1.RouteListRuns: m(), apiv1.RouteGetRun: m(), apiv1.RouteCancelRun: m(),
		apiv1.RouteStartRun:          {Need: Member, Action: "run.start", Target: "automation"},
		apiv1.RouteCreateAutomation:  a("automation.create", "automation"),
		apiv1.RouteUpdateAutomation:  a("automation.update", "automation"),
		apiv1.RouteDeleteAutomation:  a("automation.delete", "automation"),
		apiv1.RouteEnableAutomation:  a("automation.enable", "automation"),
		apiv1.RouteDisableAutomation: a("automation.disable", "automation"),
		apiv1.RouteRotateHookSecret:  a("automation.rotate_hook_secret", "automation"),
		apiv1.RouteListIntegrations:  {Need: Admin},
		apiv1.RouteAddIntegration:    a("integration.add", "integration"),
		apiv1.RouteRemoveIntegration: a("integration.remove", "integration"),
	}
}

// workRules are the routes of sessions and tasks: a member's own work,
// and what is shared with them; a session or task one may not see is 404.
func workRules() map[string]Rule {
	m := Rule{Need: Member}
	ses, task := Rule{Need: Member, Scope: ScopeSession}, Rule{Need: Member, Scope: ScopeTask}
	return map[string]Rule{
		apiv1.RouteCreateSession: m, apiv1.RouteListSessions: m, apiv1.RouteChanges: m,
		apiv1.RouteGetSession: ses, apiv1.RouteDeleteSession: ses, apiv1.RouteExec: ses, apiv1.RouteExecWS: ses,
		apiv1.RouteFileGet: ses, apiv1.RouteFilePut: ses, apiv1.RouteFileList: ses, apiv1.RouteFileStat: ses,
		apiv1.RouteEvents: ses, apiv1.RouteSuspend: ses, apiv1.RouteResume: ses, apiv1.RouteSnapshot: ses,
		apiv1.RouteOutboxPut: ses, apiv1.RouteOutboxList: ses, apiv1.RouteEgress: ses,
		apiv1.RouteStartTask: m, apiv1.RouteListTasks: m,
		apiv1.RouteGetTask: task, apiv1.RouteTaskEvents: task, apiv1.RouteSendTask: task, apiv1.RouteStopTask: task,
		apiv1.RouteTaskDiff: task, apiv1.RouteTaskFiles: task, apiv1.RouteTaskPR: task,
	}
}
