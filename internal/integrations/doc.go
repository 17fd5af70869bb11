// Package integrations keeps the services engrams talks to (Slack, GitHub, Linear): each configured
// once, its settings checked and its credentials sealed, opened only for the parts that call the service.
// Imported by the API, server wiring and the integration packages (slackapp).
package integrations
