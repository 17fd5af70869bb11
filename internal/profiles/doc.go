// Package profiles keeps admin-curated session settings (image, harness, repositories, env,
// egress, credentials, skills, apps), validates them listing every problem, and resolves each into
// its grant receipt. Imported by tasks (through an interface), the API and cmd/ wiring.
package profiles
