// Package apiv1 holds the public REST API's wire types and routes (the
// contract for other languages is api/openapi.yaml). Anyone may import it:
// it imports nothing internal. The server and package client share it.
package apiv1
