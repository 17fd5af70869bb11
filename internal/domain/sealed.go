package domain

// SealedKind names the rows that hold a value sealed at rest; each binds
// its ciphertexts to the row with its own associated data.
type SealedKind string

// The rows sealed at rest. A new kind needs its associated data below, and
// re-sealing (secrets.Reseal) covers it from then on.
const (
	SealedSecret             SealedKind = "secret"              // Secret.Sealed: users' secrets and engrams's own (the gateway key)
	SealedRegistryCredential SealedKind = "registry_credential" // RegistryCredential.Sealed
	SealedHookSecret         SealedKind = "hook_secret"         // Automation.HookSecret: a webhook trigger's signing secret
	SealedIntegration        SealedKind = "integration"         // Integration.Sealed: a service's credentials
)

// SealedKinds lists every kind of sealed row.
func SealedKinds() []SealedKind {
	return []SealedKind{SealedSecret, SealedRegistryCredential, SealedHookSecret, SealedIntegration}
}

// AssociatedData binds a ciphertext to row id of kind k: seal and open with
// it. These bytes are in every stored ciphertext; they never change.
func (k SealedKind) AssociatedData(id string) []byte {
	switch k {
	case SealedSecret:
		return []byte("secret:" + id)
	case SealedRegistryCredential:
		return []byte("registry-credential:" + id)
	case SealedHookSecret:
		return []byte("hook-secret:" + id)
	case SealedIntegration:
		return []byte("integration:" + id)
	}
	return []byte(string(k) + ":" + id)
}

// SealedValue is one sealed row's value, for re-sealing it.
type SealedValue struct {
	Kind   SealedKind
	ID     string
	Sealed []byte
}
