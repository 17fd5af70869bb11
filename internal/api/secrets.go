package api

import (
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
)

// createSecret stores a secret. Its value goes to the coordinator only: it
// is never logged or returned, and a malformed body is described without
// quoting any of its values.
func (s *Server) createSecret(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateSecretRequest
	if !s.decodeWith(w, r, &req, describeRedacted) {
		return
	}
	v, err := s.co.CreateSecret(r.Context(), coordinator.SecretRequest{Name: req.Name, Kind: req.Kind, Value: []byte(req.Value), Meta: req.Meta})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, secretOut(v))
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	vs, err := s.co.Secrets(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apiv1.SecretList{Secrets: make([]apiv1.Secret, 0, len(vs))}
	for _, v := range vs {
		out.Secrets = append(out.Secrets, secretOut(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	v, err := s.co.DeleteSecret(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, secretOut(v))
}

// secretOut shows a secret: never its value.
func secretOut(v coordinator.SecretView) apiv1.Secret {
	s := v.Secret
	return apiv1.Secret{ID: s.ID, Name: s.Name, Kind: s.Kind, Meta: v.Meta, UsedBy: v.UsedBy, CreatedAt: s.CreatedAt, DeletedAt: s.DeletedAt}
}
