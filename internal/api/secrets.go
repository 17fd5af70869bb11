package api

import (
	"context"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/secrets"
)

// createSecret stores a secret. Its value goes to the coordinator only: it
// is never logged or returned, and a malformed body is described without
// quoting any of its values.
// SecretService keeps users' secrets sealed (secrets.Vault).
type SecretService interface {
	Create(ctx context.Context, req secrets.SecretRequest) (secrets.SecretView, error)
	List(ctx context.Context, org domain.OrgID) ([]secrets.SecretView, error)
	Delete(ctx context.Context, org domain.OrgID, nameOrID string) (secrets.SecretView, error)
}

// secretsRouter serves secrets; values go in and never come out.
type secretsRouter struct {
	*base
	co SecretService
}

func (s *secretsRouter) route(h func(string, http.HandlerFunc)) {
	h(apiv1.RouteCreateSecret, s.createSecret)
	h(apiv1.RouteListSecrets, s.listSecrets)
	h(apiv1.RouteDeleteSecret, s.deleteSecret)
}

func (s *secretsRouter) createSecret(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateSecretRequest
	if !s.decodeWith(w, r, &req, describeRedacted) {
		return
	}
	v, err := s.co.Create(r.Context(), secrets.SecretRequest{Org: principalFrom(r.Context()).OrgID, Name: req.Name, Kind: req.Kind, Value: []byte(req.Value), Meta: req.Meta})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	noteTarget(r, v.Secret.Name)
	writeJSON(w, http.StatusCreated, secretOut(v))
}

func (s *secretsRouter) listSecrets(w http.ResponseWriter, r *http.Request) {
	p, ok := readPage(w, r)
	if !ok {
		return
	}
	vs, err := s.co.List(r.Context(), principalFrom(r.Context()).OrgID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	all := make([]apiv1.Secret, 0, len(vs))
	for _, v := range vs {
		all = append(all, secretOut(v))
	}
	var out apiv1.SecretList
	out.Items, out.NextCursor = pageOf(all, func(s apiv1.Secret) string { return s.Name }, p)
	writeJSON(w, http.StatusOK, out)
}

func (s *secretsRouter) deleteSecret(w http.ResponseWriter, r *http.Request) {
	v, err := s.co.Delete(r.Context(), principalFrom(r.Context()).OrgID, r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, secretOut(v))
}

// secretOut shows a secret: never its value.
func secretOut(v secrets.SecretView) apiv1.Secret {
	s := v.Secret
	return apiv1.Secret{ID: string(s.ID), Name: s.Name, Kind: s.Kind, Meta: v.Meta, UsedBy: v.UsedBy, CreatedAt: s.CreatedAt, DeletedAt: s.DeletedAt}
}
