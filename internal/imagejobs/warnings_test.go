package imagejobs

import (
	"context"
	"slices"
	"testing"

	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/image"
)

// warningMaterializer is the fake materializer whose results carry warnings.
type warningMaterializer struct {
	*coordinatortest.Materializer
	warnings []string
}

func (w warningMaterializer) Materialize(ctx context.Context, req image.Request) (image.Result, error) {
	res, err := w.Materializer.Materialize(ctx, req)
	res.Warnings = w.warnings
	return res, err
}

// What the materializer warns of is recorded on the job, whether the job then
// succeeds or fails later (in the capture).
func TestImageJobRecordsWarnings(t *testing.T) {
	t.Parallel()
	warnings := []string{"left out 2 device nodes, never created from an image: /dev/console, /dev/null; the guest's /dev is devtmpfs, with the kernel's own device nodes"}
	tests := []struct {
		name     string
		warnings []string
		warmFail string
		state    domain.ImageJobState
	}{
		{"ready", warnings, "", domain.JobReady},
		{"failed in the warm-up", warnings, "boom\n", domain.JobFailed},
		{"none", nil, "", domain.JobReady},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			imgs := warningMaterializer{&coordinatortest.Materializer{Digests: map[string]string{"reg/app:1": "sha256:ddd"}}, tc.warnings}
			e := newEnvWith(t, Config{}, Deps{Images: imgs})
			hostID, h := e.addHost(t, "a", 8)
			h.WarmFail = tc.warmFail
			e.keepAlive(t, hostID)
			_, job, err := e.im.EnableImage(context.Background(), EnableImageRequest{Org: domain.FirstOrg, Ref: "reg/app:1", Config: ImageConfig{Warmup: "true"}})
			if err != nil {
				t.Fatal(err)
			}
			job = waitJob(t, e, job.ID)
			if job.State != tc.state || !slices.Equal(job.Warnings, tc.warnings) {
				t.Fatalf("job %s with warnings %q, want %s with %q", job.State, job.Warnings, tc.state, tc.warnings)
			}
		})
	}
}
