package apiv1

import "time"

// Agent routes: harnesses, secrets and profiles (issue 6).
const (
	RouteBuildHarness  = "POST /v1/harnesses/build" // BuildHarnessRequest -> Harness (200; may take minutes)
	RouteAddHarness    = "POST /v1/harnesses"       // tar or tar.gz of a directory holding harness.json -> Harness
	RouteListHarnesses = "GET /v1/harnesses"        // -> HarnessList
	RouteGetHarness    = "GET /v1/harnesses/{name}" // ?version= (default: the newest) -> Harness
	// RouteDeleteHarness (?version=, default the newest) -> Harness with
	// deleted_at: no longer listed or named by new profiles and sessions;
	// sessions made with it keep it.
	RouteDeleteHarness = "DELETE /v1/harnesses/{name}"

	RouteCreateSecret = "POST /v1/secrets"          // CreateSecretRequest -> Secret (201); the value is never returned
	RouteListSecrets  = "GET /v1/secrets"           // -> SecretList
	RouteDeleteSecret = "DELETE /v1/secrets/{name}" // name or id -> Secret

	RouteCreateProfile = "POST /v1/profiles"          // CreateProfileRequest -> ProfileResponse (201)
	RouteListProfiles  = "GET /v1/profiles"           // -> ProfileList
	RouteGetProfile    = "GET /v1/profiles/{name}"    // name or id -> ProfileResponse
	RouteUpdateProfile = "PUT /v1/profiles/{name}"    // UpdateProfileRequest -> ProfileResponse (409 if the version moved)
	RouteDeleteProfile = "DELETE /v1/profiles/{name}" // -> Profile
	// RoutePreviewReceipt resolves a spec as a save would, saving nothing:
	// the receipt an editor shows beside an unsaved form.
	RoutePreviewReceipt = "POST /v1/profiles/receipt" // PreviewReceiptRequest -> ReceiptPreview
)

// PreviewReceiptRequest is the body of RoutePreviewReceipt.
type PreviewReceiptRequest struct {
	Spec ProfileSpec `json:"spec"`
}

// ReceiptPreview answers RoutePreviewReceipt: the receipt the spec would
// have, and the problems a save would refuse it for.
type ReceiptPreview struct {
	Receipt  Receipt  `json:"receipt"`
	Problems []string `json:"problems"`
}

// BuildHarnessRequest builds a built-in harness from its npm package.
type BuildHarnessRequest struct {
	Name    string `json:"name"`              // claude-code, codex or shell
	Version string `json:"version,omitempty"` // exact version or npm dist-tag; "" = latest
	Libc    string `json:"libc,omitempty"`    // claude-code only: glibc (default) or musl
}

// Harness is a registered harness bundle and what its descriptor says.
type Harness struct {
	ID          string              `json:"id"`
	Name        string              `json:"name"`
	Version     string              `json:"version"`
	Protocol    string              `json:"protocol"`
	Entrypoint  []string            `json:"entrypoint"`
	Models      []string            `json:"models"` // the default first; "*" admits any model
	Modes       []string            `json:"modes"`  // the default first
	Credentials []HarnessCredential `json:"credentials"`
	Hosts       []string            `json:"hosts"` // hosts the harness talks to
	Requires    HarnessRequires     `json:"requires"`
	Digest      string              `json:"digest"`
	SizeBytes   int64               `json:"size_bytes"`
	Builtin     bool                `json:"builtin"`
	CreatedAt   time.Time           `json:"created_at"`
	DeletedAt   *time.Time          `json:"deleted_at,omitempty"`
}

// HarnessCredential is a secret a harness needs, by kind.
type HarnessCredential struct {
	Kind       string `json:"kind"`                   // e.g. anthropic_api_key
	Env        string `json:"env"`                    // the variable the harness reads it from
	BaseURLEnv string `json:"base_url_env,omitempty"` // the variable pointing it at its provider
}

// HarnessRequires is what a harness needs of an image.
type HarnessRequires struct {
	Libc     string   `json:"libc"` // glibc, musl or none (runs anywhere)
	GlibcMin string   `json:"glibc_min,omitempty"`
	Libs     []string `json:"libs,omitempty"`
}

// HarnessList answers RouteListHarnesses.
type HarnessList struct {
	Items []Harness `json:"items"` // never null
	// NextCursor is the ?cursor= of the next page; "" on the last.
	NextCursor string `json:"next_cursor"`
}

// Secret kinds.
const (
	SecretAnthropicAPIKey = "anthropic_api_key"
	SecretOpenAIAPIKey    = "openai_api_key"
	SecretGitHTTPS        = "git_https"
	SecretGitHubApp       = "github_app" // the value is the app's private key (PEM); the coordinator mints short-lived installation tokens with it
	SecretGeneric         = "generic"
)

// SecretMeta is what is not secret about a secret.
type SecretMeta struct {
	BaseURL  string `json:"base_url,omitempty"` // where the key is used (model keys default to the provider's API)
	Username string `json:"username,omitempty"` // git_https: the login name
	Host     string `json:"host,omitempty"`     // git_https, github_app: the git host it is for (host[:port])
	// github_app: the app's client ID or app ID and the installation
	// tokens are minted for; BaseURL is the REST API (default
	// https://api.github.com, GitHub Enterprise Server's https://HOST/api/v3).
	AppID          string `json:"app_id,omitempty"`
	InstallationID int64  `json:"installation_id,omitempty"`
}

// CreateSecretRequest stores a secret. Value is sealed at rest and never
// returned, logged or quoted.
type CreateSecretRequest struct {
	Name  string     `json:"name"`
	Kind  string     `json:"kind"` // Secret*
	Value string     `json:"value"`
	Meta  SecretMeta `json:"meta"`
}

// Secret is a secret as shown: never its value.
type Secret struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Kind      string     `json:"kind"`
	Meta      SecretMeta `json:"meta"`
	UsedBy    []string   `json:"used_by,omitempty"` // profiles naming it
	CreatedAt time.Time  `json:"created_at"`
	DeletedAt time.Time  `json:"deleted_at,omitzero"`
}

// SecretList answers RouteListSecrets.
type SecretList struct {
	Items []Secret `json:"items"` // never null
	// NextCursor is the ?cursor= of the next page; "" on the last.
	NextCursor string `json:"next_cursor"`
}

// ProfileSpec is an admin-curated recipe for tasks.
type ProfileSpec struct {
	Image        string            `json:"image"`                    // an enabled image's name
	Harness      string            `json:"harness"`                  // NAME (the newest) or NAME@VERSION
	Model        string            `json:"model,omitempty"`          // "" = the harness's default
	Mode         string            `json:"mode,omitempty"`           // "" = the harness's default
	Repos        []ProfileRepo     `json:"repos,omitempty"`          // cloned by the coordinator
	Env          map[string]string `json:"env,omitempty"`            // not secret
	Egress       []string          `json:"egress,omitempty"`         // host[:port] allowlist
	Credentials  []string          `json:"credentials,omitempty"`    // secret names: the harness's model keys
	Skills       []string          `json:"skills,omitempty"`         // recorded; not mounted yet
	Apps         []ProfileApp      `json:"apps,omitempty"`           // recorded; not exposed yet
	IdleTimeoutS int               `json:"idle_timeout_s,omitempty"` // 0: server default; -1: never
}

// ProfileRepo is a git repository a task starts with.
type ProfileRepo struct {
	URL        string `json:"url"`                  // http or https
	Ref        string `json:"ref,omitempty"`        // "" = the default branch
	Path       string `json:"path,omitempty"`       // one path component; "" = the URL's last element without .git
	Credential string `json:"credential,omitempty"` // the name of a git_https or github_app secret for the repo's host
	// Push lets the guest push to the repository through the credential
	// broker (git-receive-pack; a GitHub App token gets contents: write).
	// Without it the guest may only fetch.
	Push bool `json:"push,omitempty"`
	// API lets the guest call the host's REST API for this repository
	// through the broker (api.github.com/repos/OWNER/NAME, or
	// /api/v3/repos/OWNER/NAME on another host): reads, and with Push a
	// few writes (pull requests, issues, comments, statuses, check runs,
	// git refs, contents).
	API bool `json:"api,omitempty"`
}

// ProfileApp is a port inside the guest that serves an app.
type ProfileApp struct {
	Name string `json:"name"`
	Port int    `json:"port"`
}

// Grant kinds: who a profile grant names.
const (
	GrantEveryone = "everyone" // every member of the organisation
	GrantUser     = "user"     // one member; Subject is their user id
	GrantGroup    = "group"    // the members in a group; Subject is its name
)

// Grant lets members start tasks with a profile. Owners and admins may
// use every profile of their organisation; members those granted to
// them, to a group they are in, or to everyone.
type Grant struct {
	Kind    string `json:"kind"`              // GrantEveryone, GrantUser or GrantGroup
	Subject string `json:"subject,omitempty"` // a user id or a group name; "" for everyone
}

// Profile is a stored profile.
type Profile struct {
	ID        string      `json:"id"`
	Name      string      `json:"name"`
	Spec      ProfileSpec `json:"spec"`
	Grants    []Grant     `json:"grants"`  // who may use it; never null
	Version   int64       `json:"version"` // bumped by every edit
	CreatedAt time.Time   `json:"created_at"`
	UpdatedAt time.Time   `json:"updated_at"`
	DeletedAt time.Time   `json:"deleted_at,omitzero"`
}

// CreateProfileRequest is the body of RouteCreateProfile. Without grants
// only the organisation's owners and admins may use the profile.
type CreateProfileRequest struct {
	Name   string      `json:"name"`
	Spec   ProfileSpec `json:"spec"`
	Grants []Grant     `json:"grants,omitempty"`
}

// UpdateProfileRequest replaces a profile's spec, and its grants when
// Grants is set (absent keeps them); Version is the version the edit was
// made from.
type UpdateProfileRequest struct {
	Spec    ProfileSpec `json:"spec"`
	Grants  *[]Grant    `json:"grants,omitempty"`
	Version int64       `json:"version"`
}

// ProfileResponse is a profile with what it grants now. Problems lists what
// keeps tasks from starting with it (something it names was deleted or
// changed since it was saved); the receipt is then partial.
type ProfileResponse struct {
	Profile  Profile  `json:"profile"`
	Receipt  Receipt  `json:"receipt"`
	Problems []string `json:"problems,omitempty"`
}

// ProfileList answers RouteListProfiles.
type ProfileList struct {
	Items []Profile `json:"items"` // never null
	// NextCursor is the ?cursor= of the next page; "" on the last.
	NextCursor string `json:"next_cursor"`
}

// Receipt says what a task started from a profile gets, resolved against
// the registered images, harnesses and secrets.
type Receipt struct {
	Image   ReceiptImage   `json:"image"`
	Harness ReceiptHarness `json:"harness"`
	Model   string         `json:"model,omitempty"` // effective: the profile's or the harness's default
	Mode    string         `json:"mode,omitempty"`
	Powers  []string       `json:"powers"` // plain sentences
	Hosts   []ReceiptHost  `json:"hosts"`
	// Enforcement says, per session backend, whether the terms of Hosts
	// hold whatever runs in the guest, and how.
	Enforcement  []ReceiptEnforcement `json:"enforcement"`
	Credentials  []ReceiptCredential  `json:"credentials"`
	Repos        []ProfileRepo        `json:"repos"`
	Env          []string             `json:"env"` // names only
	Skills       []ReceiptSkill       `json:"skills"`
	Apps         []ReceiptApp         `json:"apps"`
	IdleTimeoutS int                  `json:"idle_timeout_s,omitempty"`
}

// ReceiptImage is the image a task starts from.
type ReceiptImage struct {
	ID     string `json:"id,omitempty"`
	Name   string `json:"name"`
	Ref    string `json:"ref,omitempty"`
	Digest string `json:"digest,omitempty"` // "" while the image is being enabled
	Libc   string `json:"libc,omitempty"`
}

// ReceiptHarness is the registered bundle the profile's harness resolves to.
type ReceiptHarness struct {
	ID       string `json:"id,omitempty"`
	Name     string `json:"name"`
	Version  string `json:"version,omitempty"`
	Digest   string `json:"digest,omitempty"`
	Protocol string `json:"protocol,omitempty"`
}

// ReceiptHost is a host named by the profile, its harness or its
// credentials, whether the guest can reach it and how.
type ReceiptHost struct {
	Host      string `json:"host"`
	Why       string `json:"why"`       // what names it
	Reachable bool   `json:"reachable"` // from the guest
	Via       string `json:"via"`       // Via*: how the guest reaches it
	// Enforced: some backend makes it so whatever runs in the guest;
	// EnforcedOn names those backends (Receipt.Enforcement says how).
	Enforced   bool     `json:"enforced"`
	EnforcedOn []string `json:"enforced_on"`
	Reason     string   `json:"reason"` // plain: how, or why not
}

// How the guest reaches a host (ReceiptHost.Via).
const (
	// ViaGateway: only through the model gateway, which adds the key
	// outside the guest and forwards to the provider.
	ViaGateway = "gateway"
	// ViaProxy: directly, through the host's egress proxy, which checks
	// the name and passes TLS through untouched (the guest verifies the
	// server; no credential is added).
	ViaProxy = "proxy"
	// ViaBrokered: through the egress proxy, which terminates TLS (the
	// guest trusts the deployment's CA for this host only), verifies the
	// upstream and adds the credential outside the guest; the guest holds
	// a placeholder.
	ViaBrokered = "brokered"
)

// Session backends a receipt speaks of (ReceiptEnforcement.Backend,
// ReceiptHost.EnforcedOn).
const (
	BackendQEMU        = "qemu"
	BackendFirecracker = "firecracker"
	BackendProcess     = "process"
)

// ReceiptEnforcement is what one backend enforces of a receipt's network
// terms.
type ReceiptEnforcement struct {
	Backend  string `json:"backend"`  // Backend*
	Enforced bool   `json:"enforced"` // the terms hold whatever runs in the guest
	How      string `json:"how"`      // plain sentence
}

// Credential deliveries.
const (
	DeliveryGateway = "gateway-injected"  // the guest sees a placeholder; the model gateway adds the key
	DeliveryClone   = "coordinator-clone" // the coordinator clones with it; never in the guest
	DeliveryEnv     = "guest-env"         // in the guest's environment (none today)
)

// ReceiptCredential is a secret the profile names and how a task uses it.
type ReceiptCredential struct {
	Name     string `json:"name"`
	SecretID string `json:"secret_id,omitempty"`
	Kind     string `json:"kind"`
	Delivery string `json:"delivery"`      // Delivery*
	Env      string `json:"env,omitempty"` // the variable the guest sees (a placeholder for gateway-injected keys)
	// EnforcedOn names the backends on which the real secret never
	// enters the guest, whatever runs there.
	EnforcedOn []string `json:"enforced_on"`
	Detail     string   `json:"detail"` // plain sentence
}

// ReceiptSkill is a skill bundle the profile names.
type ReceiptSkill struct {
	Name    string `json:"name"`
	Mounted bool   `json:"mounted"` // false: not built yet
}

// ReceiptApp is an app port the profile names.
type ReceiptApp struct {
	Name    string `json:"name"`
	Port    int    `json:"port"`
	Exposed bool   `json:"exposed"` // false: not built yet
}
