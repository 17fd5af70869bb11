package apiv1

// RouteDashboardLogin exchanges a one-time login code (the link `engrams
// dev` prints) for a user token: no bearer token, the code is the
// credential, and it works once.
const RouteDashboardLogin = "POST /v1/dashboard/login" // DashboardLoginRequest -> DashboardLoginResponse

// DashboardLoginRequest is the body of RouteDashboardLogin.
type DashboardLoginRequest struct {
	Code string `json:"code"`
}

// DashboardLoginResponse answers RouteDashboardLogin: a new user token
// for the browser (shown only here).
type DashboardLoginResponse struct {
	Token  Token  `json:"token"`
	Secret string `json:"secret"`
}
