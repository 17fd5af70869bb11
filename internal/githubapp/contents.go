package githubapp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
)

// MaxFile bounds the text a github_file block reads: rules files and the
// like, not whole sources.
const MaxFile = 64 << 10

// File reads a file of repo (owner/name) at ref ("": the default branch)
// through the contents API; a file the repository does not have at that
// ref reads "", so a block can go on without it.
func (a *App) File(ctx context.Context, repo, ref, file string) (string, error) {
	clean := path.Clean("/" + strings.TrimSpace(file))[1:]
	if !domain.ValidRepo(repo) || clean == "" || clean != strings.TrimSpace(file) || len(clean) > 1024 {
		return "", fmt.Errorf("want a repository owner/name and a file's path in it, not %q %q", connector.Clip(repo, 100), connector.Clip(file, 200))
	}
	c, err := a.conf(ctx)
	if err != nil {
		return "", err
	}
	if c, err = a.forRepo(ctx, c, repo); err != nil {
		return "", err
	}
	p := "/repos/" + repo + "/contents/" + (&url.URL{Path: clean}).EscapedPath()
	if ref != "" {
		p += "?" + url.Values{"ref": {ref}}.Encode()
	}
	var raw json.RawMessage
	err = a.rest(ctx, c, http.MethodGet, p, nil, &raw)
	if ae := (*apiError)(nil); errors.As(err, &ae) && ae.status == http.StatusNotFound {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var got struct {
		Type     string `json:"type"`
		Encoding string `json:"encoding"`
		Size     int64  `json:"size"`
		Content  string `json:"content"`
	}
	if b := bytes.TrimSpace(raw); len(b) > 0 && b[0] == '[' { // a directory's listing
		got.Type = "dir"
	} else if err := json.Unmarshal(raw, &got); err != nil {
		return "", fmt.Errorf("github: read %s: %w", clean, err)
	}
	return decodeFile(clean, got.Type, got.Encoding, got.Size, got.Content)
}

// decodeFile is a contents answer's text: a file, base64 in lines, at
// most MaxFile bytes.
func decodeFile(name, typ, encoding string, size int64, content string) (string, error) {
	switch {
	case typ != "file":
		return "", fmt.Errorf("github: %s is a %q, not a file", name, connector.Clip(typ, 20))
	case size > MaxFile || base64.StdEncoding.DecodedLen(len(content)) > MaxFile+MaxFile/8:
		return "", fmt.Errorf("github: %s is over %d bytes", name, MaxFile)
	case encoding != "base64":
		return "", fmt.Errorf("github: %s comes as %q, not base64", name, connector.Clip(encoding, 20))
	}
	b, err := base64.StdEncoding.DecodeString(strings.NewReplacer("\n", "", "\r", "").Replace(content))
	if err != nil {
		return "", fmt.Errorf("github: decode %s: %w", name, err)
	}
	if len(b) > MaxFile {
		return "", fmt.Errorf("github: %s is over %d bytes", name, MaxFile)
	}
	return connector.Clip(strings.ToValidUTF8(string(b), "\uFFFD"), MaxFile), nil
}
