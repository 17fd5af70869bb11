// Package hostlink is the coordinator⇄host protocol: the host dials one WebSocket, both ends run
// yamux over it and speak HTTP on its streams. It holds the version, the messages, both ends of the
// transport and the coordinator's typed client of host commands. Imported by the coordinator side and the host.
package hostlink
