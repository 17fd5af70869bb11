package apiv1

import (
	"encoding/json"
	"time"
)

// Integration routes. {kind} is slack, github or linear.
const (
	RouteAddIntegration    = "POST /v1/integrations"          // AddIntegrationRequest -> Integration (201); its built-in automations installed, disabled
	RouteListIntegrations  = "GET /v1/integrations"           // -> IntegrationList
	RouteRemoveIntegration = "DELETE /v1/integrations/{kind}" // forget its settings and credentials
	// RouteSlackEvents takes Slack's Events API deliveries: no token,
	// Slack's signature (X-Slack-Signature over the timestamp and body).
	RouteSlackEvents = "POST /v1/integrations/slack/events"
	// RouteGitHubEvents takes GitHub's webhook deliveries: no token,
	// X-Hub-Signature-256 over the body; X-GitHub-Delivery is done once.
	RouteGitHubEvents = "POST /v1/integrations/github/events"
	// RouteLinearEvents takes Linear's webhook deliveries: no token,
	// Linear-Signature over the body, a webhookTimestamp within a minute.
	RouteLinearEvents = "POST /v1/integrations/linear/events"
)

// AddIntegrationRequest configures a service (again, replacing what was
// there): its settings, and its credentials by name, sealed at rest and
// never returned.
type AddIntegrationRequest struct {
	Kind    string            `json:"kind"`
	Config  json.RawMessage   `json:"config,omitempty"`
	Secrets map[string]string `json:"secrets"`
}

// Integration is a configured service.
type Integration struct {
	Kind      string          `json:"kind"`
	Config    json.RawMessage `json:"config"`
	Secrets   []string        `json:"secrets"` // the credentials' names
	UpdatedAt time.Time       `json:"updated_at"`
	// Builtins are the built-in automations installed (disabled) by this add.
	Builtins []string `json:"builtins,omitempty"`
}

// IntegrationList answers RouteListIntegrations.
type IntegrationList struct {
	Items []Integration `json:"items"` // never null
	// NextCursor is the ?cursor= of the next page; "" on the last.
	NextCursor string `json:"next_cursor"`
}
