package harnessreg

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/store"
)

// defaultRootLibc is the C library of the default root image sessions
// without an image boot (static busybox: none).
const defaultRootLibc = guestapi.LibcNone

// PinHarness resolves spec.Harness ("name" for the newest, or
// "name@version") to a registered bundle and checks it can run on the
// session's root filesystem (libc is the image's C library), so a session
// that could never start its agent is refused at once with the reason.
func (c *Registry) PinHarness(ctx context.Context, spec *domain.SessionSpec, libc string) error {
	spec.HarnessID = ""
	if spec.Harness == "" {
		return nil
	}
	name, version, _ := strings.Cut(spec.Harness, "@")
	if name == "" || len(spec.Harness) > 160 || strings.ContainsAny(spec.Harness, " \x00\n/") {
		return fmt.Errorf("%w: harness %q: want NAME or NAME@VERSION", domain.ErrInvalid, spec.Harness)
	}
	h, err := c.st.FindHarness(ctx, name, version)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: no harness %s is registered (engrams harness build, or harness add)", domain.ErrInvalid, spec.Harness)
	}
	if err != nil {
		return fmt.Errorf("find harness %s: %w", spec.Harness, err)
	}
	d, err := guestapi.ParseHarnessDescriptor(h.Descriptor)
	if err != nil {
		return fmt.Errorf("harness %s@%s: %w", h.Name, h.Version, err)
	}
	where := "the image " + spec.Image
	if spec.Image == "" {
		libc, where = defaultRootLibc, "the default root image (no C library: static programs only)"
	}
	if err := d.Requires.Compatible(libc, ""); err != nil {
		return fmt.Errorf("%w: harness %s@%s cannot run on %s: %w; use an image with %s, or a build of the harness for %s",
			domain.ErrInvalid, h.Name, h.Version, where, err, d.Requires.Libc, libcOrNone(libc))
	}
	spec.HarnessID = h.ID
	spec.Egress = append(spec.Egress, d.Hosts...) // the coordinator sorts and dedupes
	return nil
}

func libcOrNone(libc string) string {
	if libc == "" {
		return guestapi.LibcNone
	}
	return libc
}

// Bundle returns the bundle a session was created with.
func (c *Registry) Bundle(ctx context.Context, spec domain.SessionSpec) (domain.Harness, error) {
	h, err := c.st.GetHarness(ctx, spec.HarnessID)
	if err != nil {
		return h, fmt.Errorf("harness %s of the session: %w", spec.Harness, err)
	}
	return h, nil
}
