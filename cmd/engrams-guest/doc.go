// Command engrams-guest is the guest daemon that runs inside every machine:
// it serves exec, terminals and file transfer to the host on the listeners
// given by --listen, and reaps orphans when it runs as PID 1.
package main
