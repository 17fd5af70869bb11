// Package api embeds openapi.yaml, the public REST API's contract for every
// language, so the server can serve it at apiv1.RouteOpenAPI; a test checks
// it against the routes and wire types in package apiv1.
package api
