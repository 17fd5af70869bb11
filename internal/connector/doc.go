// Package connector is the seam every integration (Slack, GitHub, Linear, signed webhooks) plugs into: verify a
// delivery, say what it means as typed trigger events, execute its block kinds; HMAC, clipping and escaping written once.
// Imported by the integration packages (which import it and domain only), intake, autorun and the server's wiring.
package connector
