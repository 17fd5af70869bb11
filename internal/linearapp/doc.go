// Package linearapp is the Linear integration: signed webhook deliveries of issues created or labelled,
// which start runs, and the comments blocks post on issues, once each. Imported by the API, server wiring
// and cmd/.
package linearapp
