package domain

import "testing"

func TestValidRepo(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		repo string
		ok   bool
	}{
		{"acme/app", true},
		{"acme-co/web.site_2", true},
		{"a/.github", true},
		{"acme", false},
		{"acme/app/extra", false},
		{"acme/..", false},
		{"acme/.", false},
		{"../app", false},
		{"-acme/app", false},
		{"acme_co/app", false},
		{"acme/app?x=1", false},
		{"", false},
	} {
		if got := ValidRepo(c.repo); got != c.ok {
			t.Errorf("ValidRepo(%q) = %v, want %v", c.repo, got, c.ok)
		}
	}
}
