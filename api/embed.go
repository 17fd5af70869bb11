package api

import "embed"

// files holds the document; embed.FS (rather than a []byte) keeps the
// import explicit and the contents read-only.
//
//go:embed openapi.yaml
var files embed.FS

// ContentType is the media type to serve the document with.
const ContentType = "application/yaml"

// OpenAPI returns the OpenAPI 3.1 document (YAML). Each call returns a new
// copy the caller may keep.
func OpenAPI() []byte {
	b, err := files.ReadFile("openapi.yaml")
	if err != nil {
		panic("api: openapi.yaml missing from the embedded files: " + err.Error()) // unreachable: go:embed guarantees it
	}
	return b
}
