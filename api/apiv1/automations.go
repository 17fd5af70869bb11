package apiv1

import (
	"encoding/json"
	"time"
)

// Automation routes. {name} is an automation's name or id.
const (
	RouteCreateAutomation  = "POST /v1/automations"                    // CreateAutomationRequest -> AutomationResponse (201; a webhook's secret shown once)
	RouteListAutomations   = "GET /v1/automations"                     // -> AutomationList, by name
	RouteGetAutomation     = "GET /v1/automations/{name}"              // -> Automation
	RouteUpdateAutomation  = "PUT /v1/automations/{name}"              // UpdateAutomationRequest -> AutomationResponse (409 if the version moved)
	RouteDeleteAutomation  = "DELETE /v1/automations/{name}"           // -> Automation; its runs are cancelled and deleted
	RouteEnableAutomation  = "POST /v1/automations/{name}/enable"      // -> Automation: its trigger starts runs
	RouteDisableAutomation = "POST /v1/automations/{name}/disable"     // -> Automation: only manual runs
	RouteRotateHookSecret  = "POST /v1/automations/{name}/hook-secret" // -> AutomationResponse (the new secret, shown once)
	RouteStartRun          = "POST /v1/automations/{name}/runs"        // StartRunRequest -> RunResponse (201; 200 for a delivery seen before)
	RouteListRuns          = "GET /v1/automations/{name}/runs"         // -> RunList, newest first
	RouteGetRun            = "GET /v1/runs/{id}"                       // -> RunDetail (the run and its steps)
	RouteCancelRun         = "POST /v1/runs/{id}/cancel"               // -> Run (cancelled)
	RouteListBuiltins      = "GET /v1/automation-builtins"             // -> BuiltinList: the built-in automations to start from
	// RouteHook takes signed webhook deliveries: no token, the
	// X-Engrams-Timestamp and X-Engrams-Signature headers instead ("v1=" +
	// hex HMAC-SHA256 of "TIMESTAMP.BODY" with the hook's secret), and
	// X-Engrams-Delivery naming the delivery so a retry starts nothing.
	// -> RunResponse (202; 200 for a delivery seen before; 401 bad signature)
	RouteHook = "POST /v1/hooks/{slug}"
)

// Webhook headers (RouteHook).
const (
	HeaderHookTimestamp = "X-Engrams-Timestamp"
	HeaderHookSignature = "X-Engrams-Signature"
	HeaderHookDelivery  = "X-Engrams-Delivery"
)

// CreateAutomationRequest saves a definition, JSON or YAML text.
type CreateAutomationRequest struct {
	Definition string `json:"definition"`
	Enabled    bool   `json:"enabled,omitempty"`
}

// UpdateAutomationRequest saves a new version while the automation is at
// Version (0: whatever it is at).
type UpdateAutomationRequest struct {
	Definition string `json:"definition"`
	Version    int64  `json:"version,omitempty"`
}

// Automation is a saved automation at its current version.
type Automation struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Enabled bool   `json:"enabled"`
	Version int64  `json:"version"`
	Trigger string `json:"trigger"`            // its trigger's kind
	HookURL string `json:"hook_url,omitempty"` // webhook triggers: the path deliveries go to
	// Definition is the current version's definition (AutomationDefinition
	// in the OpenAPI document).
	Definition json.RawMessage `json:"definition"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
}

// AutomationResponse answers a save: the automation and, when one was
// made, its webhook secret, shown this once.
type AutomationResponse struct {
	Automation
	HookSecret string `json:"hook_secret,omitempty"`
}

// AutomationList answers RouteListAutomations.
type AutomationList struct {
	Items []Automation `json:"items"` // never null
	// NextCursor is the ?cursor= of the next page; "" on the last.
	NextCursor string `json:"next_cursor"`
}

// StartRunRequest starts a run by hand: inputs by name, and a trigger
// payload to test the automation with (a sample webhook body, say).
type StartRunRequest struct {
	Inputs  map[string]any  `json:"inputs,omitempty"`
	Trigger json.RawMessage `json:"trigger,omitempty"`
}

// Run states.
const (
	RunQueued     = "queued"
	RunRunning    = "running"
	RunWaiting    = "waiting"
	RunSucceeded  = "succeeded"
	RunFailed     = "failed"
	RunCancelled  = "cancelled"
	RunSuperseded = "superseded"
	RunSkipped    = "skipped"
	RunRefused    = "refused"
)

// Run is one run of one version of an automation.
type Run struct {
	ID             string          `json:"id"`
	AutomationID   string          `json:"automation_id"`
	Automation     string          `json:"automation"` // its name
	Version        int64           `json:"version"`
	State          string          `json:"state"`
	Trigger        string          `json:"trigger"` // what started it
	ConcurrencyKey string          `json:"concurrency_key,omitempty"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	Inputs         json.RawMessage `json:"inputs,omitempty"`
	Error          string          `json:"error,omitempty"`
	// ActorID is the person who caused it (their mention, pull request
	// or issue, or their start by hand); absent for none.
	ActorID   string     `json:"actor_id,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
}

// RunResponse answers a start: the run, and whether it is the run of a
// delivery seen before.
type RunResponse struct {
	Run
	Duplicate bool `json:"duplicate,omitempty"`
}

// RunList answers RouteListRuns.
type RunList struct {
	Items []Run `json:"items"` // never null
	// NextCursor is the ?cursor= of the next page; "" on the last.
	NextCursor string `json:"next_cursor"`
}

// RunStep is the record of one block a run executed. A block run again
// after its replica died keeps its seq and counts another attempt.
type RunStep struct {
	Seq        int64           `json:"seq"`
	Block      string          `json:"block"` // its id
	Kind       string          `json:"kind"`
	Path       string          `json:"path"` // where it is in the definition, e.g. blocks[2].body[0] pass 1
	State      string          `json:"state"`
	Attempt    int64           `json:"attempt"`
	Input      json.RawMessage `json:"input,omitempty"` // its fields as rendered for the run
	Output     string          `json:"output,omitempty"`
	Error      string          `json:"error,omitempty"`
	StartedAt  time.Time       `json:"started_at"`
	EndedAt    *time.Time      `json:"ended_at,omitempty"`
	DurationMS int64           `json:"duration_ms,omitempty"`
}

// RunDetail is a run with its step record.
type RunDetail struct {
	Run
	Steps []RunStep `json:"steps"`
}

// Builtin is a built-in automation to start from.
type Builtin struct {
	Name        string `json:"name"`
	Integration string `json:"integration"` // the integration it comes with
	Definition  string `json:"definition"`  // YAML
}

// BuiltinList answers RouteListBuiltins.
type BuiltinList struct {
	Items []Builtin `json:"items"` // never null
	// NextCursor is the ?cursor= of the next page; "" on the last.
	NextCursor string `json:"next_cursor"`
}
