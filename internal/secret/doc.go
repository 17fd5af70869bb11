// Package secret seals secrets at rest with a Tink AEAD keyset kept in a 0600 JSON file, rotated by
// adding primaries (old keys keep opening); associated data binds each ciphertext to its row.
// Imported by cmd/ wiring, which hands the Sealer to the parts that seal (they declare its interface).
package secret
