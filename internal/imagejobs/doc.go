// Package imagejobs enables OCI images: enable/refresh/disable requests, the durable job loop that
// materializes an image and captures its base snapshot on a host, and what sessions need of images
// (pinning, the base, prefetch, GC roots). Imported by the API and cmd/ wiring.
package imagejobs
