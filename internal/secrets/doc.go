// Package secrets keeps users' secrets sealed at rest: create, list (never a value), delete, and
// open for the parts that use them outside the guest (gateway, repository clones). Imported by
// the API, those parts and cmd/ wiring.
package secrets
