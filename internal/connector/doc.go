// Package connector is the seam every integration (Slack, GitHub, Linear, signed webhooks) plugs into: verify, decode,
// execute blocks; HMAC, clipping, escaping and mapping accounts to members written once. Imported by the integration
// packages (which import it and domain only), intake, autorun and the server's wiring.
package connector
