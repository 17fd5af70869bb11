package domain

import "testing"

// TestSealedAssociatedData pins the bytes every stored ciphertext was
// sealed with: changing them would make every sealed row unreadable.
func TestSealedAssociatedData(t *testing.T) {
	t.Parallel()
	cases := []struct {
		kind SealedKind
		want string
	}{
		{SealedSecret, "secret:id-1"},
		{SealedRegistryCredential, "registry-credential:id-1"},
		{SealedHookSecret, "hook-secret:id-1"},
		{SealedIntegration, "integration:id-1"},
	}
	if len(cases) != len(SealedKinds()) {
		t.Fatalf("%d kinds pinned, %d exist: pin the new kind's associated data", len(cases), len(SealedKinds()))
	}
	for _, c := range cases {
		if got := string(c.kind.AssociatedData("id-1")); got != c.want {
			t.Errorf("%s: associated data %q, want %q", c.kind, got, c.want)
		}
	}
}
