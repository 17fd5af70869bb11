// Package coordinator owns the session lifecycle: it records intent in the
// op log, claims ops under a fencing epoch, drives hosts through the host
// link and watches heartbeats. It keeps no state another replica cannot rebuild.
package coordinator
