// Package domain is the leaf of typed nouns every layer shares: session, host and task ids,
// the session spec, host facts and capacity, and desired state. It imports only the standard
// library, and anything may import it.
package domain
