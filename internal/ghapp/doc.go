// Package ghapp mints GitHub App installation tokens: an RS256 app JWT, then a token scoped to named
// repositories and permissions, cached until shortly before it expires. Imports only the standard
// library; imported by secrets (key checks), tasks (repository clones) and server/cmd wiring.
package ghapp
