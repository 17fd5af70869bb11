package host

import (
	"context"
	"fmt"
	"net/http"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
)

// checkHarness confirms that a machine started with a harness has it
// ready in the guest (its descriptor loaded, its entrypoint present), so a
// session is Active only once its harness can take prompts. A machine
// without a harness passes.
func (a *Agent) checkHarness(ctx context.Context, mc *machine) error {
	if mc.spec.HarnessID == "" {
		return nil
	}
	var st guestapi.HarnessStatus
	if err := a.guestCall(ctx, mc, http.MethodGet, guestapi.PathHarness, nil, &st); err != nil {
		return failure(http.StatusBadGateway, hostlink.CodeGuestFailed, fmt.Errorf("read the harness state of session %s: %w", mc.sessionID, err))
	}
	if st.State != guestapi.HarnessReady {
		msg := st.Error
		if msg == "" {
			msg = "no harness bundle is mounted"
		}
		return failure(http.StatusBadGateway, hostlink.CodeGuestFailed,
			fmt.Errorf("harness %s of session %s did not start (%s): %s", mc.spec.Harness, mc.sessionID, st.State, msg))
	}
	return nil
}
