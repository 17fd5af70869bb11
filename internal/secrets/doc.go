// Package secrets keeps users' secrets sealed at rest: create, list (never a value), delete, open for
// the parts that use them outside the guest (gateway, repository clones), and re-seal every sealed row
// after a key rotation. Imported by the API, those parts and cmd/ wiring.
package secrets
