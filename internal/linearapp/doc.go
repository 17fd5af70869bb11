// Package linearapp is the Linear integration: signed deliveries of issues created or labelled, which start runs as
// their linked person, comments that link an account, and linear_comment, posted once each. It imports only the seam
// (connector) and domain; the server wires it. Nothing else imports it.
package linearapp
