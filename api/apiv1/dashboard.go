package apiv1

// RouteDashboardLogin exchanges a one-time login code (the link `engrams
// dev` prints) for a browser sign-in (the cookie SessionCookie): no key,
// the code is the credential, and it works once.
const RouteDashboardLogin = "POST /v1/dashboard/login" // DashboardLoginRequest -> SignedIn

// DashboardLoginRequest is the body of RouteDashboardLogin.
type DashboardLoginRequest struct {
	Code string `json:"code"`
}

// RouteChanges is a change feed for lists (SSE): ?topics= names some of
// ChangeSessions, ChangeTasks and ChangeHosts (comma-separated); each
// change is one message whose event is its topic and data `{}`, coalesced,
// so a list re-reads itself instead of polling. Messages carry no id: a
// client that reconnects re-reads its lists once.
const RouteChanges = "GET /v1/changes"

// Change feed topics.
const (
	ChangeSessions = "sessions"
	ChangeTasks    = "tasks"
	ChangeHosts    = "hosts"
)
