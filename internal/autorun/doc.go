// Package autorun runs automations: it saves their versions, starts runs from triggers (manual, schedules,
// signed webhooks), and executes each run as a durable DBOS workflow, one recorded step per block.
// Imported by the API (its service) and cmd/ wiring.
package autorun
