package main

import (
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/vmm"
)

// backendChoice is the backend picked for this host and every backend that
// was considered, with why it was or was not usable (shown in `host get`).
type backendChoice struct {
	backend    vmm.Backend
	considered []domain.BackendFacts
}
