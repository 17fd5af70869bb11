// Package coordinator owns session lifecycles (op log, fencing epochs, hosts over the host link,
// heartbeats) and agents: sealed secrets, profiles, tasks, the model gateway, the harness registry.
// State is in the store; a task's setup runs in one replica at a time, taken over by another if it stops.
package coordinator
