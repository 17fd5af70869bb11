// Package egressnet makes one machine's egress path: a vmnet namespace whose filtering resolver and
// proxy serve the session's egress policy (netpolicy), with every query, connection and dropped flow
// reported to the coordinator. Imported by cmd only (it fills host.Deps.Network).
package egressnet
