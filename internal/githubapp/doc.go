// Package githubapp is the GitHub integration: signed pull request and @engrams comment deliveries (authors held to each
// trigger's floor, comments to members, runs as their linked person), and its blocks' effects, each made once.
// It imports only the seam (connector), domain and ghapp; the server wires it, the API opens task pull requests with it.
package githubapp
