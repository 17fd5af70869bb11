// Package apiv1 holds the public REST API's wire types and routes, shared by
// the server (package api) and the Go client (package client). The contract
// for other languages is api/openapi.yaml.
package apiv1
