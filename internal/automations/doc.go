// Package automations is the automation model: definitions (a trigger, a tree of blocks, typed
// inputs, concurrency settings), their validation, and the pure state transitions of runs.
// Coordinator side: the automation service, the API and cmd import it; it imports only domain.
package automations
