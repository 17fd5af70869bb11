// Package server assembles one coordinator replica: store, coordinator,
// host link endpoint, cross-replica router and public API behind one HTTP
// listener. cmd/engrams picks the store backend and hands it in.
package server
