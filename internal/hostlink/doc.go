// Package hostlink is the coordinator⇄host protocol: the host dials one
// WebSocket, both ends run yamux over it and speak HTTP on its streams.
// It holds the protocol version, the messages and both ends of the transport.
package hostlink
