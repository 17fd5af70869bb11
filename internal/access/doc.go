// Package access decides what a caller may do: a key's principal (person or service key, organisation, role,
// fleet grant) and every API route's policy as data. It imports std, domain and apiv1; api, server and cmd import it.
package access
