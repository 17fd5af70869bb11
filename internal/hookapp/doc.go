// Package hookapp is signed webhooks as an integration: a delivery to POST /v1/hooks/{slug}, verified with its
// automation's secret, becomes a run of that automation. It implements the seam's Receiver (connector);
// the server wires it into the delivery pipeline (intake).
package hookapp
