package domain

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// GrantKind is who a profile grant names.
type GrantKind string

const (
	GrantEveryone GrantKind = "everyone" // every member of the profile's organisation
	GrantUser     GrantKind = "user"     // one member (Subject is their user id)
	GrantGroup    GrantKind = "group"    // the members in a group (Subject is its name)
)

// Grant lets members of a profile's organisation start tasks with it.
// Owners and admins may use every profile of their organisation; a
// member only those granted to them, to a group they are in, or to
// everyone.
type Grant struct {
	Kind    GrantKind
	Subject string // "" for everyone
}

// Grant bounds: what an admin may write, checked where it is given.
const (
	MaxGrants      = 200
	MaxGroups      = 50
	MaxGroupName   = 100
	maxSubjectSize = 200
)

func (g Grant) String() string {
	if g.Kind == GrantEveryone {
		return string(g.Kind)
	}
	return string(g.Kind) + ":" + g.Subject
}

// CheckGrants says what is wrong with grants, if anything: an unknown
// kind, a missing subject, a repeat, too many. Callers add the category
// (ErrInvalid where a person gave them).
func CheckGrants(grants []Grant) error {
	if len(grants) > MaxGrants {
		return fmt.Errorf("%d grants; at most %d", len(grants), MaxGrants)
	}
	seen := map[Grant]bool{}
	for _, g := range grants {
		switch g.Kind {
		case GrantEveryone:
			if g.Subject != "" {
				return errors.New("a grant to everyone names no one")
			}
		case GrantUser, GrantGroup:
			if strings.TrimSpace(g.Subject) == "" || len(g.Subject) > maxSubjectSize {
				return fmt.Errorf("a %s grant needs a name of 1 to %d bytes", g.Kind, maxSubjectSize)
			}
		default:
			return fmt.Errorf("grant kind %q; one of everyone, user, group", g.Kind)
		}
		if seen[g] {
			return fmt.Errorf("%s is granted twice", g)
		}
		seen[g] = true
	}
	return nil
}

// CheckGroups says a member's groups are well formed.
func CheckGroups(groups []string) error {
	if len(groups) > MaxGroups {
		return fmt.Errorf("%d groups; at most %d", len(groups), MaxGroups)
	}
	for _, g := range groups {
		if strings.TrimSpace(g) == "" || len(g) > MaxGroupName {
			return fmt.Errorf("a group name is 1 to %d bytes", MaxGroupName)
		}
	}
	return nil
}

// Grantee is who asks to use a profile: a member of an organisation, the
// groups they are in, and whether they curate its profiles (owners and
// admins).
type Grantee struct {
	OrgID   OrgID
	UserID  UserID
	Groups  []string
	Curator bool
}

// MayUse says g may start tasks with p: nothing of another organisation,
// every profile of one's own for its curators, else what a grant names.
func (g Grantee) MayUse(p Profile) bool {
	if g.OrgID == "" || p.Org != g.OrgID {
		return false
	}
	if g.Curator {
		return true
	}
	return slices.ContainsFunc(p.Grants, func(gr Grant) bool {
		switch gr.Kind {
		case GrantEveryone:
			return true
		case GrantUser:
			return g.UserID != "" && gr.Subject == string(g.UserID)
		case GrantGroup:
			return slices.Contains(g.Groups, gr.Subject)
		}
		return false
	})
}
