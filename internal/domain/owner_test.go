package domain

import "testing"

func TestViewerSees(t *testing.T) {
	t.Parallel()
	ada := Viewer{OrgID: "o1", UserID: "ada"}
	admin := Viewer{OrgID: "o1", UserID: "root", All: true}
	for _, tt := range []struct {
		name string
		v    Viewer
		o    Owner
		want bool
	}{
		{"own private", ada, Owner{OrgID: "o1", UserID: "ada"}, true},
		{"another member's private", ada, Owner{OrgID: "o1", UserID: "bob"}, false},
		{"another member's shared", ada, Owner{OrgID: "o1", UserID: "bob", Shared: true}, true},
		{"the organisation's (an automation's)", ada, Owner{OrgID: "o1", Shared: true}, true},
		{"no owner, not shared", ada, Owner{OrgID: "o1"}, false},
		{"admin: another member's private", admin, Owner{OrgID: "o1", UserID: "bob"}, true},
		{"admin: another organisation's", admin, Owner{OrgID: "o2", UserID: "bob", Shared: true}, false},
		{"member: another organisation's, same user id", ada, Owner{OrgID: "o2", UserID: "ada"}, false},
		{"no organisation sees nothing", Viewer{UserID: "ada", All: true}, Owner{UserID: "ada"}, false},
		{"unowned row", ada, Owner{}, false},
	} {
		if got := tt.v.Sees(tt.o); got != tt.want {
			t.Errorf("%s: Sees = %v, want %v", tt.name, got, tt.want)
		}
	}
}
