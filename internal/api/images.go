package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/imagejobs"
)

// ImageService enables and shows images (imagejobs.Images).
type ImageService interface {
	EnableImage(ctx context.Context, req imagejobs.EnableImageRequest) (imagejobs.ImageView, domain.ImageJob, error)
	RefreshImage(ctx context.Context, org domain.OrgID, nameOrID string) (imagejobs.ImageView, domain.ImageJob, error)
	DisableImage(ctx context.Context, org domain.OrgID, nameOrID string) (imagejobs.ImageView, error)
	Image(ctx context.Context, org domain.OrgID, nameOrID string) (imagejobs.ImageView, error)
	Images(ctx context.Context, org domain.OrgID, all bool) ([]imagejobs.ImageView, error)
	ImageJobs(ctx context.Context, org domain.OrgID, nameOrID string) ([]domain.ImageJob, error)
	ImageJob(ctx context.Context, org domain.OrgID, id domain.ImageJobID) (domain.ImageJob, error)
	Defaults() imagejobs.ImageDefaults
}

// imagesRouter serves images and their enable jobs.
type imagesRouter struct {
	*base
	co ImageService
}

func (s *imagesRouter) route(h func(string, http.HandlerFunc)) {
	h(apiv1.RouteEnableImage, s.enableImage)
	h(apiv1.RouteListImages, s.listImages)
	h(apiv1.RouteGetImage, s.getImage)
	h(apiv1.RouteDisableImage, s.disableImage)
	h(apiv1.RouteRefreshImage, s.refreshImage)
	h(apiv1.RouteImageJobs, s.listImageJobs)
	h(apiv1.RouteGetImageJob, s.getImageJob)
}

// enableImage answers 202 with the image and its job, or 200 when the job
// is already ready (the image was enabled before). The request's
// credentials go to the coordinator only: they are never logged, and a
// malformed body is described without quoting any of its values.
func (s *imagesRouter) enableImage(w http.ResponseWriter, r *http.Request) {
	var req apiv1.EnableImageRequest
	if !s.decodeWith(w, r, &req, describeRedacted) {
		return
	}
	in := enableRequest(req)
	in.Org = orgOf(r)
	v, job, err := s.co.EnableImage(r.Context(), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusAccepted
	if job.State == domain.JobReady {
		status = http.StatusOK
	}
	noteTarget(r, v.Image.Name)
	writeJSON(w, status, apiv1.ImageJobResponse{Image: imageOut(v), Job: imageJobOut(job)})
}

// enableRequest converts the wire request to the coordinator's.
func enableRequest(req apiv1.EnableImageRequest) imagejobs.EnableImageRequest {
	out := imagejobs.EnableImageRequest{
		Ref:  req.Ref,
		Name: req.Name,
		Config: imagejobs.ImageConfig{
			Env: req.Env, MemoryMiB: req.MemoryMiB, VCPUs: req.VCPUs, DiskGiB: req.DiskGiB, Workdir: req.Workdir,
			Warmup: req.Warmup, WarmupTimeoutS: req.WarmupTimeoutS, WarmupStallS: req.WarmupStallS,
		},
	}
	if c := req.Credentials; c != nil {
		out.Auth = &imagejobs.RegistryAuth{Username: c.Username, Password: c.Password, Token: c.Token}
	}
	return out
}

// describeRedacted says what is wrong with a body that may hold secrets
// without quoting any value from it (json's own messages quote numbers,
// and syntax errors quote characters).
func describeRedacted(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return "invalid JSON at byte " + itoa(syntax.Offset)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return "want a JSON object"
		}
		return fmt.Sprintf("field %s: want %s", field, jsonKind(typ.Type.String()))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the body ends early"
	}
	if msg, ok := unknownField(err); ok {
		return msg // the field's name (bounded), not a value
	}
	return "not the documented JSON object"
}

// jsonKind names the JSON kind a Go type is read from.
func jsonKind(goType string) string {
	switch {
	case goType == "string":
		return "a string"
	case strings.HasPrefix(goType, "int"):
		return "an integer"
	case strings.HasPrefix(goType, "map["), strings.Contains(goType, "."):
		return "an object"
	}
	return goType
}

func (s *imagesRouter) listImages(w http.ResponseWriter, r *http.Request) {
	p, ok := readPage(w, r)
	if !ok {
		return
	}
	all := false
	if v := r.URL.Query().Get("all"); v != "" {
		var err error
		if all, err = strconv.ParseBool(v); err != nil {
			writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "all="+quote(v)+": want true or false")
			return
		}
	}
	vs, err := s.co.Images(r.Context(), orgOf(r), all)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	views := make([]apiv1.Image, 0, len(vs))
	for _, v := range vs {
		views = append(views, imageOut(v))
	}
	d := s.co.Defaults()
	out := apiv1.ImageList{Defaults: &apiv1.ImageDefaults{MemoryMiB: d.MemoryMiB, VCPUs: d.VCPUs, DiskGiB: d.DiskGiB,
		WarmupTimeoutS: d.WarmupTimeoutS, WarmupStallS: d.WarmupStallS, MaxMemoryMiB: d.MaxMemoryMiB, MaxVCPUs: d.MaxVCPUs, MaxDiskGiB: d.MaxDiskGiB}}
	out.Items, out.NextCursor = pageOf(views, func(i apiv1.Image) string { return i.Name + "\x00" + i.ID }, p)
	writeJSON(w, http.StatusOK, out)
}

func (s *imagesRouter) getImage(w http.ResponseWriter, r *http.Request) {
	v, err := s.co.Image(r.Context(), orgOf(r), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, imageOut(v))
}

func (s *imagesRouter) disableImage(w http.ResponseWriter, r *http.Request) {
	v, err := s.co.DisableImage(r.Context(), orgOf(r), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, imageOut(v))
}

func (s *imagesRouter) refreshImage(w http.ResponseWriter, r *http.Request) {
	v, job, err := s.co.RefreshImage(r.Context(), orgOf(r), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, apiv1.ImageJobResponse{Image: imageOut(v), Job: imageJobOut(job)})
}

func (s *imagesRouter) listImageJobs(w http.ResponseWriter, r *http.Request) {
	p, ok := readPage(w, r)
	if !ok {
		return
	}
	jobs, err := s.co.ImageJobs(r.Context(), orgOf(r), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	all := make([]apiv1.ImageJob, 0, len(jobs))
	for _, j := range jobs {
		all = append(all, imageJobOut(j))
	}
	var out apiv1.ImageJobList
	out.Items, out.NextCursor = pageOf(all, func(j apiv1.ImageJob) string { return j.ID }, p) // ids are time-ordered (UUIDv7)
	writeJSON(w, http.StatusOK, out)
}

func (s *imagesRouter) getImageJob(w http.ResponseWriter, r *http.Request) {
	job, err := s.co.ImageJob(r.Context(), orgOf(r), domain.ImageJobID(r.PathValue("id")))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, imageJobOut(job))
}

// imageOut shows an image; its credential only as "who@registry".
func imageOut(v imagejobs.ImageView) apiv1.Image {
	img, cfg := v.Image, v.Config
	out := apiv1.Image{
		ID: string(img.ID), Name: img.Name, Ref: img.Ref, Digest: img.Digest, State: v.State,
		Config: apiv1.ImageConfig{
			Env: cfg.Env, MemoryMiB: cfg.MemoryMiB, VCPUs: cfg.VCPUs, DiskGiB: cfg.DiskGiB, Workdir: cfg.Workdir,
			Warmup: cfg.Warmup, WarmupTimeoutS: cfg.WarmupTimeoutS, WarmupStallS: cfg.WarmupStallS,
			Libc: cfg.Libc, User: cfg.User, Entrypoint: cfg.Entrypoint,
		},
		Credentials: v.Credential, BaseSnapshotID: string(img.BaseID), Facts: hostFactsOut(v.Facts), ReadyHosts: hostIDs(v.ReadyHosts),
		CreatedAt: img.CreatedAt, UpdatedAt: img.UpdatedAt,
	}
	if v.LastJob != nil {
		j := imageJobOut(*v.LastJob)
		out.LastJob = &j
	}
	return out
}

// imageJobOut shows a job; stage times that do not decode are left out.
func imageJobOut(j domain.ImageJob) apiv1.ImageJob {
	out := apiv1.ImageJob{
		ID: string(j.ID), ImageID: string(j.ImageID), Kind: string(j.Kind), State: string(j.State), Stage: j.Stage,
		BytesDone: j.BytesDone, BytesTotal: j.BytesTotal, Attempts: j.Attempts, Error: j.Error,
		OutputTail: j.OutputTail, Warnings: j.Warnings, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt,
	}
	if len(j.Stages) > 0 {
		var ms map[string]int64
		if json.Unmarshal(j.Stages, &ms) == nil && len(ms) > 0 {
			out.StagesMS = ms
		}
	}
	return out
}

// hostIDs are ids as the wire shows them.
func hostIDs(ids []domain.HostID) []string {
	if ids == nil {
		return nil
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = string(id)
	}
	return out
}
