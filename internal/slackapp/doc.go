// Package slackapp is the Slack integration: signed Events API and Socket Mode deliveries (mentions on the profiles their
// channel may use; replies from a thread's starter continue its task), post_slack, and the relay posting turns back.
// It imports only the seam (connector) and domain; the server wires it.
package slackapp
