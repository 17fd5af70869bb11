package api

import "github.com/engrams/engrams/api/apiv1"

// The request bodies below take idle_timeout_s (and a session's
// max_lifetime_s) in the CLI's forms too ("15m", "never"; apiv1.Seconds):
// each outer field shadows the embedded one of the same JSON name while
// decoding, and the request is the embedded one with it copied in.

type createSessionIn struct {
	apiv1.CreateSessionRequest
	IdleTimeout apiv1.Seconds `json:"idle_timeout_s,omitempty"`
	MaxLifetime apiv1.Seconds `json:"max_lifetime_s,omitempty"`
}

func (in createSessionIn) request() apiv1.CreateSessionRequest {
	r := in.CreateSessionRequest
	r.IdleTimeoutSec, r.MaxLifetimeSec = int(in.IdleTimeout), int(in.MaxLifetime)
	return r
}

type profileSpecIn struct {
	apiv1.ProfileSpec
	IdleTimeout apiv1.Seconds `json:"idle_timeout_s,omitempty"`
}

func (in profileSpecIn) spec() apiv1.ProfileSpec {
	s := in.ProfileSpec
	s.IdleTimeoutS = int(in.IdleTimeout)
	return s
}

type createProfileIn struct {
	apiv1.CreateProfileRequest
	Spec profileSpecIn `json:"spec"`
}

type updateProfileIn struct {
	apiv1.UpdateProfileRequest
	Spec profileSpecIn `json:"spec"`
}

type previewReceiptIn struct {
	apiv1.PreviewReceiptRequest
	Spec profileSpecIn `json:"spec"`
}
