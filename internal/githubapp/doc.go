// Package githubapp is the GitHub integration: signed webhook deliveries (pull requests, review requests,
// @engrams comments from collaborators) that start runs, and the comments and reviews blocks post, once each.
// Imported by the API, server wiring and cmd/.
package githubapp
