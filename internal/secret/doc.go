// Package secret seals secrets at rest (registry credentials) with a Tink
// AEAD keyset kept in a 0600 JSON file; associated data binds each ciphertext
// to the row it belongs to, so a sealed value cannot be moved to another row.
package secret
