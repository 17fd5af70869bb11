// Package slackapp is the Slack integration: signed Events API deliveries and Socket Mode, mentions that
// start runs, thread replies that continue their task, and the relay that posts each turn back, edited in place.
// Imported by the API, server wiring and cmd/.
package slackapp
