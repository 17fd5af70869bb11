// Package fleetsim is the deterministic whole-fleet simulation test (sim_test.go says how it runs
// under testing/synctest): the real coordinator and SQLite store against simulated hosts.
package fleetsim
