package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/harness"
	"github.com/engrams/engrams/internal/harnessreg"
)

// HarnessService builds, registers and shows harness bundles
// (harnessreg.Registry).
type HarnessService interface {
	BuildHarness(ctx context.Context, req harnessreg.BuildHarnessRequest) (harnessreg.HarnessView, error)
	AddHarness(ctx context.Context, tarball io.Reader) (harnessreg.HarnessView, error)
	Harnesses(ctx context.Context) ([]harnessreg.HarnessView, error)
	Harness(ctx context.Context, name, version string) (harnessreg.HarnessView, error)
	DeleteHarness(ctx context.Context, name, version string) (harnessreg.HarnessView, error)
}

// harnessesRouter serves the harness registry.
type harnessesRouter struct {
	*base
	co HarnessService
}

func (s *harnessesRouter) route(h func(string, http.HandlerFunc)) {
	h(apiv1.RouteBuildHarness, s.buildHarness)
	h(apiv1.RouteAddHarness, s.addHarness)
	h(apiv1.RouteListHarnesses, s.listHarnesses)
	h(apiv1.RouteGetHarness, s.getHarness)
	h(apiv1.RouteDeleteHarness, s.deleteHarness)
}

func (s *harnessesRouter) deleteHarness(w http.ResponseWriter, r *http.Request) {
	v, err := s.co.DeleteHarness(r.Context(), r.PathValue("name"), r.URL.Query().Get("version"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, harnessOut(v))
}

// buildHarness builds a built-in harness; the answer may take minutes (a
// first build downloads the npm packages).
func (s *harnessesRouter) buildHarness(w http.ResponseWriter, r *http.Request) {
	var req apiv1.BuildHarnessRequest
	if !s.decode(w, r, &req) {
		return
	}
	v, err := s.co.BuildHarness(r.Context(), harnessreg.BuildHarnessRequest{Name: req.Name, Version: req.Version, Libc: req.Libc})
	if err != nil {
		s.failHarness(w, r, err)
		return
	}
	noteTarget(r, v.Harness.Name+"@"+v.Harness.Version)
	writeJSON(w, http.StatusOK, harnessOut(v))
}

// addHarness registers a custom harness from a tar or tar.gz body.
func (s *harnessesRouter) addHarness(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/json") {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest,
			"send a tar (or tar.gz) of the harness's directory, harness.json at its root; to build a built-in harness, POST "+
				strings.TrimPrefix(apiv1.RouteBuildHarness, "POST "))
		return
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxFileBytes)
	v, err := s.co.AddHarness(r.Context(), body)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, apiv1.CodeTooLarge, "the upload is over "+itoa(s.cfg.MaxFileBytes)+" bytes")
		return
	}
	if err != nil {
		s.failHarness(w, r, err)
		return
	}
	noteTarget(r, v.Harness.Name+"@"+v.Harness.Version)
	writeJSON(w, http.StatusOK, harnessOut(v))
}

// failHarness is fail, with an unreachable npm registry a 503.
func (s *harnessesRouter) failHarness(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, harness.ErrRegistry) {
		writeError(w, http.StatusServiceUnavailable, apiv1.CodeUnavailable, err.Error())
		return
	}
	s.fail(w, r, err)
}

func (s *harnessesRouter) listHarnesses(w http.ResponseWriter, r *http.Request) {
	p, ok := readPage(w, r)
	if !ok {
		return
	}
	vs, err := s.co.Harnesses(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	all := make([]apiv1.Harness, 0, len(vs))
	for _, v := range vs {
		all = append(all, harnessOut(v))
	}
	var out apiv1.HarnessList
	out.Items, out.NextCursor = pageOf(all, func(h apiv1.Harness) string { return h.Name + "\x00" + h.Version + "\x00" + h.ID }, p)
	writeJSON(w, http.StatusOK, out)
}

func (s *harnessesRouter) getHarness(w http.ResponseWriter, r *http.Request) {
	v, err := s.co.Harness(r.Context(), r.PathValue("name"), r.URL.Query().Get("version"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, harnessOut(v))
}

func harnessOut(v harnessreg.HarnessView) apiv1.Harness {
	d, h := v.Descriptor, v.Harness
	out := apiv1.Harness{
		ID: h.ID, Name: h.Name, Version: h.Version, Protocol: d.Protocol, Entrypoint: orEmpty(d.Entrypoint),
		Models: orEmpty(d.Models), Modes: orEmpty(d.Modes), Hosts: orEmpty(d.Hosts),
		Credentials: make([]apiv1.HarnessCredential, 0, len(d.Credentials)),
		Requires:    apiv1.HarnessRequires{Libc: d.Requires.Libc, GlibcMin: d.Requires.GlibcMin, Libs: d.Requires.Libs},
		Digest:      h.Digest, SizeBytes: v.SizeBytes, Builtin: h.Builtin, CreatedAt: h.CreatedAt,
	}
	for _, c := range d.Credentials {
		out.Credentials = append(out.Credentials, apiv1.HarnessCredential{Kind: c.Kind, Env: c.Env, BaseURLEnv: c.BaseURLEnv})
	}
	if !h.DeletedAt.IsZero() {
		out.DeletedAt = &h.DeletedAt
	}
	return out
}

// orEmpty makes a nil list an empty one, so JSON shows [] rather than null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
