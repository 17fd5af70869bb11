package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/access"
	"github.com/engrams/engrams/internal/domain"
)

// GrantReads find the profile a task runs with, for the routes that
// continue or drive it (the store satisfies it).
type GrantReads interface {
	GetTask(ctx context.Context, id domain.TaskID) (domain.Task, error)
	TaskBySession(ctx context.Context, sessionID domain.SessionID) (domain.Task, error)
	GetProfile(ctx context.Context, id domain.ProfileID) (domain.Profile, error)
}

// drives says the route r is on continues or drives a task or session
// (anything but reading it): a follow-up, exec, the terminal, files
// written, suspend, resume. Ending one's own is not driving it.
func drives(r *http.Request, p access.Principal, o domain.Owner) bool {
	switch r.Pattern {
	case apiv1.RouteExecWS:
		return true
	case apiv1.RouteStopTask, apiv1.RouteDeleteSession:
		return p.Service || o.UserID != p.UserID
	}
	return r.Method != http.MethodGet && r.Method != http.MethodHead
}

// mayDrive says p may drive the task (or the session of a task) r's
// route names: owners and admins always; a member while its profile is
// granted to them (to a group they are in, or to everyone), so a shared
// task, or one of theirs whose grant was taken back, is for reading only.
// A session of no task is its owner's to drive. The default is no: a
// server that cannot look refuses.
func (a *authn) mayDrive(ctx context.Context, scope access.Scope, id string, p access.Principal) (bool, domain.Profile, error) {
	if p.Role.AtLeast(domain.RoleAdmin) {
		return true, domain.Profile{}, nil
	}
	if a.grants == nil {
		return false, domain.Profile{}, nil
	}
	var t domain.Task
	var err error
	if scope == access.ScopeTask {
		t, err = a.grants.GetTask(ctx, domain.TaskID(id))
	} else {
		t, err = a.grants.TaskBySession(ctx, domain.SessionID(id))
		if errors.Is(err, domain.ErrNotFound) {
			return true, domain.Profile{}, nil
		}
	}
	if err != nil {
		return false, domain.Profile{}, err
	}
	prof, err := a.grants.GetProfile(ctx, t.ProfileID)
	if errors.Is(err, domain.ErrNotFound) {
		return false, domain.Profile{}, nil
	}
	if err != nil {
		return false, domain.Profile{}, err
	}
	return p.Grantee().MayUse(prof), prof, nil
}

// driveRefused answers 403: p sees the thing but may not drive it.
func driveRefused(w http.ResponseWriter, scope access.Scope, id string, prof domain.Profile) {
	msg := "you may read " + string(scope) + " " + id + " but not drive it"
	if prof.Name != "" {
		msg += ": its profile " + quote(prof.Name) + " is not granted to you (an admin grants it: `engrams profile grant " + prof.Name + " user:ID`)"
	}
	writeError(w, http.StatusForbidden, apiv1.CodeForbidden, msg)
}
