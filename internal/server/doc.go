// Package server assembles one coordinator replica: the coordinator and the capability services
// (images, harnesses, secrets, profiles, gateway, tasks) wired through their interfaces, the host
// link endpoint, the cross-replica router and the public API behind one listener. Imported by cmd/.
package server
