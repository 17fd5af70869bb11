package clienttest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/engrams/engrams/api/apiv1"
)

// ImageDigest is the digest every image the fake enables resolves to.
const ImageDigest = "sha256:5f2d4e6a8b0c1d3e5f7a9b1c3d5e7f9a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9d1e"

// DefaultImageSteps is what a fake image job shows on successive polls: a
// pull with byte progress, a root filesystem, a warm-up without byte
// counts, then ready with its stage times.
func DefaultImageSteps() []apiv1.ImageJob {
	return []apiv1.ImageJob{
		{State: "pending"},
		{State: "materializing", Stage: "resolve", Attempts: 1},
		{State: "materializing", Stage: "pull", BytesDone: 81 << 20, BytesTotal: 180 << 20, Attempts: 1},
		{State: "materializing", Stage: "pull", BytesDone: 180 << 20, BytesTotal: 180 << 20, Attempts: 1},
		{State: "materializing", Stage: "rootfs", BytesTotal: 4 << 30, Attempts: 1},
		{State: "capturing", Stage: "warmup", Attempts: 1},
		{State: "ready", Attempts: 1, StagesMS: map[string]int64{
			"resolve": 300, "pull": 12000, "rootfs": 4000, "chunks": 1500, "boot": 900, "warmup": 30500, "snapshot": 2100}},
	}
}

// FailedImageSteps is a job whose warm-up fails.
func FailedImageSteps() []apiv1.ImageJob {
	return []apiv1.ImageJob{
		{State: "pending"},
		{State: "materializing", Stage: "pull", BytesDone: 1 << 20, BytesTotal: 2 << 20, Attempts: 1},
		{State: "capturing", Stage: "warmup", Attempts: 1},
		{State: "failed", Attempts: 1, Error: "warm-up exited with status 1",
			OutputTail: "npm ERR! code ENOENT\nnpm ERR! missing package.json\n",
			StagesMS:   map[string]int64{"pull": 800, "boot": 700, "warmup": 1200}},
	}
}

// fakeImage is an image and its jobs.
type fakeImage struct {
	img  apiv1.Image
	jobs []*fakeJob
}

// fakeJob is a job; its step is how many times it was read.
type fakeJob struct {
	base  apiv1.ImageJob // id, image, kind, times
	steps []apiv1.ImageJob
	read  int
}

// view is the job as its current step shows it.
func (j *fakeJob) view() apiv1.ImageJob {
	st := j.steps[min(j.read, len(j.steps)-1)]
	st.ID, st.ImageID, st.Kind, st.CreatedAt = j.base.ID, j.base.ImageID, j.base.Kind, j.base.CreatedAt
	st.UpdatedAt = j.base.CreatedAt.Add(time.Duration(j.read) * time.Second)
	return st
}

// ScriptImageJobs sets the steps jobs made from now on go through: each GET
// of a job shows its next step, and the last step stays. nil restores
// DefaultImageSteps.
func (s *Server) ScriptImageJobs(steps []apiv1.ImageJob) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.imageSteps = slices.Clone(steps)
}

// EnableRequests returns the enable requests received, credentials
// included, so tests can check what the client sent.
func (s *Server) EnableRequests() []apiv1.EnableImageRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.enables)
}

// imageFake serves the image and image job routes.
type imageFake struct{ *Server }

func (s imageFake) routes(auth func(string, http.HandlerFunc)) {
	auth(apiv1.RouteEnableImage, s.enableImage)
	auth(apiv1.RouteListImages, s.listImages)
	auth(apiv1.RouteGetImage, s.withImage(func(w http.ResponseWriter, _ *http.Request, im *fakeImage) { writeJSON(w, 200, s.imageView(im)) }))
	auth(apiv1.RouteDisableImage, s.withImage(s.disableImage))
	auth(apiv1.RouteRefreshImage, s.withImage(s.refreshImage))
	auth(apiv1.RouteImageJobs, s.withImage(s.imageJobs))
	auth(apiv1.RouteGetImageJob, s.getImageJob)
}

// enableImage decodes strictly as the real server does.
func (s imageFake) enableImage(w http.ResponseWriter, r *http.Request) {
	var req apiv1.EnableImageRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Ref == "" {
		writeErr(w, 400, "bad_request", "malformed JSON body or no ref")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enables = append(s.enables, req)
	name := req.Name
	if name == "" {
		name = defaultName(req.Ref)
	}
	if im := s.liveImage(name); im != nil {
		s.enableAgain(w, im, req.Ref)
		return
	}
	s.nextImage++
	im := &fakeImage{img: apiv1.Image{
		ID: fmt.Sprintf("img%d", s.nextImage), Name: name, Ref: req.Ref, State: "pending", Config: configOf(req),
		Credentials: credentialOf(req), CreatedAt: BaseTime(), UpdatedAt: BaseTime(),
	}}
	s.images = append(s.images, im)
	writeJSON(w, 202, apiv1.ImageJobResponse{Image: s.imageView(im), Job: s.newJobLocked(im, "enable").view()})
}

// enableAgain answers an enable of a taken name: the same ref is
// idempotent (a failed image gets a new job), another ref a conflict.
func (s imageFake) enableAgain(w http.ResponseWriter, im *fakeImage, ref string) {
	if im.img.Ref != ref {
		writeErr(w, 409, "conflict", fmt.Sprintf("image name %q is taken by %s; choose another --name or disable it first", im.img.Name, im.img.Ref))
		return
	}
	last := im.jobs[len(im.jobs)-1]
	switch v := last.view(); {
	case v.State == "ready":
		writeJSON(w, 200, apiv1.ImageJobResponse{Image: s.imageView(im), Job: v})
	case v.State == "failed":
		writeJSON(w, 202, apiv1.ImageJobResponse{Image: s.imageView(im), Job: s.newJobLocked(im, "enable").view()})
	default:
		writeJSON(w, 202, apiv1.ImageJobResponse{Image: s.imageView(im), Job: v})
	}
}

func (s imageFake) newJobLocked(im *fakeImage, kind string) *fakeJob {
	steps := s.imageSteps
	if len(steps) == 0 {
		steps = DefaultImageSteps()
	}
	s.nextJob++
	j := &fakeJob{
		base:  apiv1.ImageJob{ID: fmt.Sprintf("job%d", s.nextJob), ImageID: im.img.ID, Kind: kind, CreatedAt: BaseTime()},
		steps: slices.Clone(steps),
	}
	im.jobs = append(im.jobs, j)
	return j
}

func defaultName(ref string) string {
	repo, _, _ := strings.Cut(ref, "@")
	if i := strings.LastIndexByte(repo, '/'); i >= 0 {
		repo = repo[i+1:]
	}
	repo, _, _ = strings.Cut(repo, ":")
	return strings.ToLower(repo)
}

// registryOf is the registry host of ref (docker.io without one).
func registryOf(ref string) string {
	first, _, ok := strings.Cut(ref, "/")
	if ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return first
	}
	return "docker.io"
}

// credentialOf shows who logs in, never the secret.
func credentialOf(req apiv1.EnableImageRequest) string {
	c := req.Credentials
	switch {
	case c == nil:
		return ""
	case c.Username != "":
		return c.Username + "@" + registryOf(req.Ref)
	default:
		return "token@" + registryOf(req.Ref)
	}
}

func configOf(req apiv1.EnableImageRequest) apiv1.ImageConfig {
	cfg := apiv1.ImageConfig{Env: req.Env, MemoryMiB: req.MemoryMiB, VCPUs: req.VCPUs, DiskGiB: req.DiskGiB, Workdir: req.Workdir,
		Warmup: req.Warmup, WarmupTimeoutS: req.WarmupTimeoutS, WarmupStallS: req.WarmupStallS, Libc: "glibc"}
	for p, def := range map[*int]int{&cfg.MemoryMiB: 512, &cfg.VCPUs: 1, &cfg.DiskGiB: 4, &cfg.WarmupTimeoutS: 600, &cfg.WarmupStallS: 120} {
		if *p == 0 {
			*p = def
		}
	}
	if cfg.Workdir == "" {
		cfg.Workdir = "/"
	}
	return cfg
}

// imageView is the image as shown now: its state follows its jobs.
func (s imageFake) imageView(im *fakeImage) apiv1.Image {
	out := im.img
	if len(im.jobs) == 0 {
		return out
	}
	last := im.jobs[len(im.jobs)-1].view()
	out.LastJob = &last
	for _, j := range im.jobs {
		if j.view().State == "ready" {
			facts := s.hosts[0].Facts
			out.Digest, out.BaseSnapshotID, out.ReadyHosts, out.Facts = ImageDigest, "base-"+j.base.ID, []string{"h1"}, &facts
		}
	}
	switch {
	case out.State == "disabled":
	case out.BaseSnapshotID != "":
		out.State = "ready"
	case last.State == "failed":
		out.State = "failed"
	}
	return out
}

func (s imageFake) liveImage(nameOrID string) *fakeImage {
	for _, im := range s.images {
		if im.img.State != "disabled" && im.img.Name == nameOrID {
			return im
		}
	}
	for _, im := range s.images {
		if im.img.ID == nameOrID {
			return im
		}
	}
	return nil
}

func (s imageFake) withImage(h func(http.ResponseWriter, *http.Request, *fakeImage)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		im := s.liveImage(r.PathValue("name"))
		if im == nil {
			writeErr(w, 404, "not_found", fmt.Sprintf("image %q not found", r.PathValue("name")))
			return
		}
		h(w, r, im)
	}
}

func (s imageFake) listImages(w http.ResponseWriter, r *http.Request) {
	all := r.URL.Query().Get("all") == "true"
	s.mu.Lock()
	defer s.mu.Unlock()
	out := apiv1.ImageList{Items: []apiv1.Image{}}
	for _, im := range s.images {
		if all || im.img.State != "disabled" {
			out.Items = append(out.Items, s.imageView(im))
		}
	}
	slices.SortStableFunc(out.Items, func(a, b apiv1.Image) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, 200, out)
}

func (s imageFake) disableImage(w http.ResponseWriter, _ *http.Request, im *fakeImage) {
	im.img.State = "disabled"
	writeJSON(w, 200, s.imageView(im))
}

func (s imageFake) refreshImage(w http.ResponseWriter, _ *http.Request, im *fakeImage) {
	if im.img.State == "disabled" {
		writeErr(w, 409, "conflict", fmt.Sprintf("image %s is disabled; enable it again", im.img.Name))
		return
	}
	last := im.jobs[len(im.jobs)-1]
	if v := last.view(); v.State != "ready" && v.State != "failed" {
		writeJSON(w, 202, apiv1.ImageJobResponse{Image: s.imageView(im), Job: v})
		return
	}
	j := s.newJobLocked(im, "refresh")
	writeJSON(w, 202, apiv1.ImageJobResponse{Image: s.imageView(im), Job: j.view()})
}

func (s imageFake) imageJobs(w http.ResponseWriter, _ *http.Request, im *fakeImage) {
	out := apiv1.ImageJobList{Items: []apiv1.ImageJob{}}
	for _, j := range im.jobs {
		out.Items = append(out.Items, j.view())
	}
	writeJSON(w, 200, out)
}

// getImageJob shows the job's current step and moves it to the next.
func (s imageFake) getImageJob(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, im := range s.images {
		for _, j := range im.jobs {
			if j.base.ID == r.PathValue("id") {
				writeJSON(w, 200, j.view())
				j.read++
				return
			}
		}
	}
	writeErr(w, 404, "not_found", fmt.Sprintf("image job %s not found", r.PathValue("id")))
}
