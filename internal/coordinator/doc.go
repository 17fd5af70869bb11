// Package coordinator owns session lifecycles (op log, fencing epochs, hosts over the host link,
// heartbeats) and agents: sealed secrets, profiles, tasks, the model gateway, the harness registry.
// State is in the store, except a task's setup, which runs in the replica that started the task.
package coordinator
