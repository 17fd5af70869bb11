// Package broker is the credential broker: the deployment's CA, session-scoped placeholders for git
// credentials, and the host-link route that terminates a guest's TLS to a brokered host, verifies the
// upstream and puts the real secret in on that host's requests only. Imported by tasks (through an interface), server and cmd/.
package broker
